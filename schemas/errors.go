package schemas

import (
	"errors"
	"fmt"
)

// DecodeError reports bytes that could not be turned into a record. Reason is
// ReasonUndecodable, ReasonUnknownSchema or ReasonTooLarge.
type DecodeError struct {
	Reason string // a Reason* code
	Detail string // what was wrong, for logs and dead letters
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode record: %s: %s", e.Reason, e.Detail)
}

// InvalidError reports a decoded record that breaks a validation rule.
type InvalidError struct {
	Reason string // a Reason* code
	Detail string // which field and why
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("invalid record: %s: %s", e.Reason, e.Detail)
}

// ReasonOf returns the Reason code carried by err (a *DecodeError or an
// *InvalidError anywhere in its chain), ReasonInvalid for any other non-nil
// error, and "" for nil.
func ReasonOf(err error) string {
	if err == nil {
		return ""
	}
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Reason
	}
	var ie *InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return ReasonInvalid
}

// DetailOf returns the Detail of a *DecodeError or *InvalidError in err's
// chain, or err.Error() for other errors, and "" for nil.
func DetailOf(err error) string {
	if err == nil {
		return ""
	}
	var de *DecodeError
	if errors.As(err, &de) {
		return de.Detail
	}
	var ie *InvalidError
	if errors.As(err, &ie) {
		return ie.Detail
	}
	return err.Error()
}

func undecodable(format string, args ...any) *DecodeError {
	return &DecodeError{Reason: ReasonUndecodable, Detail: fmt.Sprintf(format, args...)}
}

func invalid(reason, format string, args ...any) *InvalidError {
	return &InvalidError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
