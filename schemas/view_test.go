package schemas

import "github.com/creditflow/creditflow/schemas/internal/avrobin"

// view is avrobin.View under the name the codec tests use.
func view[E int32 | float32](b []byte) []E { return avrobin.View[E](b) }
