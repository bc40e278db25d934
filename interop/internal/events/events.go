// Package events writes what a program observes as JSON lines on stdout,
// one object per line: {"event": NAME, "ts": UNIX_NANOSECONDS, ...fields}.
// The Rust tests follow these lines; the timestamps feed the benchmarks.
package events

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

var mu sync.Mutex

// Fields are the extra keys of one event.
type Fields map[string]any

// Emit writes one event line. Lines from concurrent goroutines never
// interleave: each is marshalled first and written in one call under a lock.
func Emit(name string, fields Fields) {
	EmitAt(name, time.Now(), fields)
}

// EmitAt is Emit with the time the event happened, taken by the caller.
func EmitAt(name string, at time.Time, fields Fields) {
	line := make(map[string]any, len(fields)+2)
	for k, v := range fields {
		line[k] = v
	}
	line["event"] = name
	line["ts"] = at.UnixNano()
	data, err := json.Marshal(line)
	if err != nil {
		data, _ = json.Marshal(map[string]any{"event": "marshal_error", "ts": at.UnixNano(), "of": name, "error": err.Error()})
	}
	data = append(data, '\n')
	mu.Lock()
	defer mu.Unlock()
	_, _ = os.Stdout.Write(data)
}

// ErrorString is err's text, or "" for nil, for an event field.
func ErrorString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
