package stage

import (
	"errors"
	"time"
	"unicode/utf8"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// reasonOf maps a decode or validation error to its dead-letter reason.
func reasonOf(err error) (reason, detail string) {
	var de *schemas.DecodeError
	if errors.As(err, &de) {
		return de.Reason, de.Detail
	}
	var ie *schemas.InvalidError
	if errors.As(err, &ie) {
		return ie.Reason, ie.Detail
	}
	return schemas.ReasonInvalid, err.Error()
}

// deadLetter builds the dead-letter message for an input record: the
// original key and bytes, the reason as a header and inside the record.
func (c *Config) deadLetter(stage string, rec consumers.Record, reason, detail string) (producers.Message, error) {
	dl := schemas.DeadLetter{
		Reason: reason, Detail: detail, Stage: stage,
		Topic: rec.Topic, Partition: int32(rec.Partition), Offset: rec.Offset,
		Key: rec.Key, Value: rec.Value, AtMs: time.Now().UnixMilli(),
	}
	b, err := schemas.DeadLetters().Encode(&dl)
	if err != nil {
		return producers.Message{}, err
	}
	c.Metrics.deadLetters.WithLabelValues(stage, reason).Inc()
	return producers.Message{
		Topic: c.Topics.DeadLetters, Key: rec.Key, Value: b,
		Headers: []producers.Header{
			{Key: schemas.HeaderSchema, Value: []byte(schemas.DeadLetters().Name())},
			{Key: schemas.HeaderReason, Value: []byte(reason)},
			{Key: schemas.HeaderDetail, Value: []byte(truncate(detail, 512))},
		},
	}, nil
}

// truncate cuts s to at most n bytes without splitting a UTF-8 character
// (a header or log field must stay valid UTF-8).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
