// Command csi-mock serves the Kubernetes end-to-end CSI mock driver
// (test/e2e/storage/drivers/csi-test/mock/service), unmodified, on a Unix
// socket: Identity, Controller and Node on one server, as the e2e suite
// runs it in a pod. It knows the mock's own volumes ("1", "2" and "3", each
// 100 GiB): a PersistentVolume's handle names one of them. It serves no
// inline volume: its NodePublishVolume of a volume it does not have
// dereferences the volume it did not find (and the process ends).
//
// With --call-log it appends every Node call it serves to a file, one JSON
// line each: {"method", "request", "error"}, the request as the protobuf
// JSON mapping with the proto field names (secrets by key only), the error
// as "Code: message". The SDK's example CSI driver writes the same lines.
//
// Faults, for tests of how a node handles a driver that fails: --fail
// METHOD=CODE[:N] answers the first N calls of a Node method (every one
// without N) with that gRPC code before the mock sees them; --hang
// METHOD[:N] holds the first N calls until the caller gives up. Injected
// answers are logged as any other.
//
// It stops on SIGTERM or SIGINT, removing its socket.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/kubernetes/test/e2e/storage/drivers/csi-test/mock/service"

	"nodeplugins/interop/internal/events"
)

// nodePrefix is the full method name prefix of the Node service.
const nodePrefix = "/csi.v1.Node/"

// fault is one injected answer: a code (none: hold until the caller gives
// up) for the first `left` calls, or for every call when `left` is -1.
type fault struct {
	code codes.Code
	hang bool
	left int
}

// faults are the injected answers by Node method name.
type faults struct {
	mu     sync.Mutex
	byName map[string]*fault
}

// take says what the call of `method` is to get, counting it.
func (f *faults) take(method string) (*fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	found, ok := f.byName[method]
	if !ok || found.left == 0 {
		return nil, false
	}
	if found.left > 0 {
		found.left--
	}
	return found, true
}

// parseCount splits "NAME[:N]" into the name and N (-1 without).
func parseCount(text string) (string, int, error) {
	name, count, found := strings.Cut(text, ":")
	if !found {
		return name, -1, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("%q: the count must be a positive number", text)
	}
	return name, n, nil
}

// codeNamed is the gRPC code of `name` ("Internal", "DeadlineExceeded").
func codeNamed(name string) (codes.Code, error) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c, nil
		}
	}
	return codes.OK, fmt.Errorf("%q: not a gRPC code name", name)
}

// repeated collects a flag given several times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// callLog appends the Node calls to a file, a line each.
type callLog struct {
	mu   sync.Mutex
	file *os.File
}

// write records a call of `method` with `request` and how it ended. The
// request goes through the protobuf JSON mapping and back through
// encoding/json, whose output (sorted keys, no spacing) is stable.
func (l *callLog) write(method string, request any, err error) {
	fields := map[string]any{}
	if message, ok := request.(proto.Message); ok {
		if data, merr := (protojson.MarshalOptions{UseProtoNames: true}).Marshal(message); merr == nil {
			_ = json.Unmarshal(data, &fields)
		}
	}
	if secrets, ok := fields["secrets"].(map[string]any); ok {
		keys := make([]string, 0, len(secrets))
		for k := range secrets {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fields["secrets"] = keys
	}
	var answer any
	if err != nil {
		st := status.Convert(err)
		answer = fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	line, merr := json.Marshal(map[string]any{"method": method, "request": fields, "error": answer})
	if merr != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.file.Write(append(line, '\n'))
}

func main() {
	endpoint := flag.String("endpoint", "", "where to serve, a socket path or unix://PATH (required)")
	name := flag.String("driver-name", service.Name, "the driver's name (the mock reports it as its node id too)")
	disableAttach := flag.Bool("disable-attach", true, "no ControllerPublish (stage and publish need no \"device\" in the publish context)")
	nodeExpansion := flag.Bool("node-expansion", false, "advertise EXPAND_VOLUME")
	logPath := flag.String("call-log", "", "append every Node call served to this file, one JSON line each")
	var fails, hangs repeated
	flag.Var(&fails, "fail", "METHOD=CODE[:N]: answer the first N calls of Node method METHOD (all without N) with CODE; repeatable")
	flag.Var(&hangs, "hang", "METHOD[:N]: hold the first N calls of Node method METHOD (all without N) until the caller gives up; repeatable")
	flag.Parse()
	path := strings.TrimPrefix(*endpoint, "unix://")
	if path == "" {
		fmt.Fprintln(os.Stderr, "csi-mock: --endpoint is required")
		os.Exit(2)
	}

	injected := &faults{byName: map[string]*fault{}}
	for _, spec := range fails {
		method, rest, ok := strings.Cut(spec, "=")
		if !ok {
			fmt.Fprintf(os.Stderr, "csi-mock: --fail %q: not METHOD=CODE[:N]\n", spec)
			os.Exit(2)
		}
		codeName, count, err := parseCount(rest)
		if err == nil {
			var code codes.Code
			code, err = codeNamed(codeName)
			injected.byName[method] = &fault{code: code, left: count}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "csi-mock: --fail: %v\n", err)
			os.Exit(2)
		}
	}
	for _, spec := range hangs {
		method, count, err := parseCount(spec)
		if err != nil {
			fmt.Fprintf(os.Stderr, "csi-mock: --hang: %v\n", err)
			os.Exit(2)
		}
		injected.byName[method] = &fault{hang: true, left: count}
	}
	var calls *callLog
	if *logPath != "" {
		file, err := os.OpenFile(*logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintf(os.Stderr, "csi-mock: %v\n", err)
			os.Exit(1)
		}
		defer file.Close()
		calls = &callLog{file: file}
	}

	mock := service.New(service.Config{
		DisableAttach:         *disableAttach,
		DriverName:            *name,
		NodeExpansionRequired: *nodeExpansion,
	})
	intercept := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method, isNode := strings.CutPrefix(info.FullMethod, nodePrefix)
		if !isNode {
			return handler(ctx, req)
		}
		var answer any
		var err error
		if f, ok := injected.take(method); ok && f.hang {
			<-ctx.Done()
			err = status.FromContextError(ctx.Err()).Err()
		} else if ok {
			err = status.Errorf(f.code, "%s fails here on purpose", method)
		} else {
			answer, err = handler(ctx, req)
		}
		if calls != nil {
			calls.write(method, req, err)
		}
		return answer, err
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "csi-mock: %v\n", err)
		os.Exit(1)
	}
	_ = os.Remove(path)
	listener, err := net.Listen("unix", path)
	if err != nil {
		fmt.Fprintf(os.Stderr, "csi-mock: %v\n", err)
		os.Exit(1)
	}
	server := grpc.NewServer(grpc.UnaryInterceptor(intercept))
	csi.RegisterIdentityServer(server, mock)
	csi.RegisterControllerServer(server, mock)
	csi.RegisterNodeServer(server, mock)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		server.Stop()
	}()
	events.Emit("serving", events.Fields{"socket": path, "driver": *name})
	if err := server.Serve(listener); err != nil {
		events.Emit("failed", events.Fields{"error": err.Error()})
	}
	_ = os.Remove(path)
}
