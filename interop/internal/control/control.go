// Package control reads requests from stdin, one JSON object per line, and
// hands each to a handler. A test drives a program by writing these lines;
// the program answers with events (see package events) carrying the
// request's "id".
package control

import (
	"bufio"
	"encoding/json"
	"io"

	"nodeplugins/interop/internal/events"
)

// Request is one control line. Op names the action; the other fields are
// the action's arguments and are read by the handler through Decode.
type Request struct {
	ID  string `json:"id"`
	Op  string `json:"op"`
	raw json.RawMessage
}

// Decode unmarshals the whole request line into v, for op-specific fields.
func (r Request) Decode(v any) error {
	return json.Unmarshal(r.raw, v)
}

// Serve reads requests from in until EOF and calls handle for each. A line
// that is not a JSON object is answered with a "bad_request" event. Serve
// returns when in is closed, which the programs take as the signal to stop.
func Serve(in io.Reader, handle func(Request)) {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for scanner.Scan() {
		line := append([]byte(nil), scanner.Bytes()...)
		if len(line) == 0 {
			continue
		}
		var req Request
		if err := json.Unmarshal(line, &req); err != nil {
			events.Emit("bad_request", events.Fields{"error": err.Error(), "line": string(line)})
			continue
		}
		req.raw = line
		handle(req)
	}
}
