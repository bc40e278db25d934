// Command kubelet-static-pods answers what pods the kubelet makes of a
// static pod path, with its own file source and pod config
// (pkg/kubelet/config), unmodified: the reference our agent's static pods
// must equal.
//
//	kubelet-static-pods PATH NODE
//
// reads PATH (a manifest file or a directory of them) as the kubelet reads
// its staticPodPath for node NODE, waits for the first update the pod
// config gives (every pod the path holds, or none), and writes
//
//	{"pods": [POD, ...] (sorted by name), "errors": ["FILE: ERROR", ...]}
//
// where the errors are what the file source logged for each manifest it
// refused, sorted.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/kubelet/config"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	v1 "k8s.io/api/core/v1"
)

type answer struct {
	Pods   []*v1.Pod `json:"pods"`
	Errors []string  `json:"errors"`
}

// refusals keeps what the file source logs about manifests it refused.
type refusals struct {
	sync.Mutex
	lines []string
}

func (r *refusals) logger() logr.Logger {
	return funcr.NewJSON(func(obj string) {
		var entry map[string]interface{}
		if err := json.Unmarshal([]byte(obj), &entry); err != nil {
			return
		}
		message, _ := entry["msg"].(string)
		if message != "Could not process manifest file" {
			return
		}
		file, _ := entry["path"].(string)
		text, _ := entry["error"].(string)
		r.Lock()
		r.lines = append(r.lines, fmt.Sprintf("%s: %s", file, text))
		r.Unlock()
	}, funcr.Options{Verbosity: 10})
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: kubelet-static-pods PATH NODE")
		os.Exit(2)
	}
	path, node := os.Args[1], os.Args[2]
	seen := &refusals{}
	logger := seen.logger()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	podConfig := config.NewPodConfig(record.NewFakeRecorder(100), nil)
	updates := podConfig.Channel(ctx, kubetypes.FileSource)
	config.NewSourceFile(logger, path, types.NodeName(node), 20*time.Second, updates)
	var out answer
	select {
	case update := <-podConfig.Updates():
		out.Pods = update.Pods
	case <-time.After(30 * time.Second):
		fmt.Fprintln(os.Stderr, "no update from the file source in 30 s")
		os.Exit(1)
	}
	sort.Slice(out.Pods, func(i, j int) bool { return out.Pods[i].Name < out.Pods[j].Name })
	seen.Lock()
	out.Errors = append([]string{}, seen.lines...)
	seen.Unlock()
	sort.Strings(out.Errors)
	if out.Pods == nil {
		out.Pods = []*v1.Pod{}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
