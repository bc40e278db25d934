package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"nodeplugins/interop/internal/events"
)

// csiHandler stands in for the kubelet's CSI registration handler, whose
// registration needs a whole volume host and an API server. It keeps the
// parts that touch the plugin: the version rule (some advertised version
// with major 1) and NodeGetInfo on the driver's endpoint, dialled as the
// kubelet's CSI client dials (authority "localhost"), and reports the node
// information it got.
type csiHandler struct{}

func (csiHandler) ValidatePlugin(_ context.Context, name, endpoint string, versions []string) error {
	if _, err := highestVersion(versions); err != nil {
		return fmt.Errorf("validation failed for CSI Driver %s at endpoint %s: %v", name, endpoint, err)
	}
	return nil
}

func (csiHandler) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	if _, err := highestVersion(versions); err != nil {
		return err
	}
	callTimeout := 2 * time.Minute
	if timeout != nil {
		callTimeout = *timeout
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	conn, err := grpc.NewClient("unix:"+strings.TrimPrefix(endpoint, "unix://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("localhost"))
	if err != nil {
		return fmt.Errorf("dial CSI driver %s at %s: %w", name, endpoint, err)
	}
	defer conn.Close()
	info, err := csipb.NewNodeClient(conn).NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{})
	if err != nil {
		return fmt.Errorf("error during CSI NodeGetInfo() call: %w", err)
	}
	topology := map[string]string{}
	if info.GetAccessibleTopology() != nil {
		topology = info.GetAccessibleTopology().GetSegments()
	}
	events.Emit("csi_node_info", events.Fields{"name": name, "node_id": info.GetNodeId(), "max_volumes_per_node": info.GetMaxVolumesPerNode(), "topology": topology})
	return nil
}

func (csiHandler) DeRegisterPlugin(context.Context, string, string) {}

// highestVersion applies the kubelet's CSI version rule: the newest
// advertised version must parse and have major version 1.
func highestVersion(versions []string) (semver.Version, error) {
	var highest *semver.Version
	for _, v := range versions {
		parsed, err := semver.ParseTolerant(v)
		if err != nil {
			return semver.Version{}, fmt.Errorf("failed to parse version %q: %w", v, err)
		}
		if highest == nil || parsed.GT(*highest) {
			highest = &parsed
		}
	}
	if highest == nil || highest.Major != 1 {
		return semver.Version{}, fmt.Errorf("none of the versions specified %q are supported", versions)
	}
	return *highest, nil
}
