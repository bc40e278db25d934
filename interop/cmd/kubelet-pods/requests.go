package main

import (
	"fmt"
	"time"

	"nodeplugins/interop/internal/control"
	"nodeplugins/interop/internal/events"
)

// requestHandler answers control requests about the pods, one at a time
// in the order they come.
type requestHandler struct {
	node *nodeKubelet
}

func (h *requestHandler) handle(req control.Request) {
	start := time.Now()
	var response any
	var err error
	switch req.Op {
	case "pods":
		response = h.node.admitted()
	default:
		err = fmt.Errorf("unknown op %q", req.Op)
	}
	events.Emit("result", events.Fields{
		"id":       req.ID,
		"op":       req.Op,
		"response": response,
		"error":    events.ErrorString(err),
		"took_ns":  time.Since(start).Nanoseconds(),
	})
}
