// Command kubelet-dns answers what resolver settings pods get, with the
// kubelet's own DNS configurer (pkg/kubelet/network/dns), unmodified: the
// reference our agent's pod DNS settings must equal.
//
// It reads a JSON list of requests on standard input,
//
//	[{"pod": POD, "cluster_dns": [IP, ...], "cluster_domain": DOMAIN,
//	  "resolv_conf": PATH ("" for none, as the kubelet's resolvConf),
//	  "node_ips": [IP, ...]}, ...]
//
// and writes the answers, one per request in order, as a JSON list:
//
//	[{"servers": [...], "searches": [...], "options": [...] (sorted: the
//	  kubelet merges them through a Go map, in no fixed order),
//	  "events": ["REASON: MESSAGE", ...] (the Warnings on the pod, in
//	  order), "error": "" or what GetPodDNS returned}, ...]
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/kubernetes/pkg/kubelet/network/dns"
)

type request struct {
	Pod           v1.Pod   `json:"pod"`
	ClusterDNS    []string `json:"cluster_dns"`
	ClusterDomain string   `json:"cluster_domain"`
	ResolvConf    string   `json:"resolv_conf"`
	NodeIPs       []string `json:"node_ips"`
}

type answer struct {
	Servers  []string `json:"servers"`
	Searches []string `json:"searches"`
	Options  []string `json:"options"`
	Events   []string `json:"events"`
	Error    string   `json:"error"`
}

func ips(texts []string) []net.IP {
	var all []net.IP
	for _, text := range texts {
		all = append(all, net.ParseIP(text))
	}
	return all
}

// podEvents drains recorder, keeping the events on the pod as "REASON:
// MESSAGE".
func podEvents(recorder *record.FakeRecorder) []string {
	events := []string{}
	for {
		select {
		case event := <-recorder.Events:
			const onPod = " involvedObject{kind=Pod,apiVersion=v1}"
			if !strings.HasSuffix(event, onPod) {
				continue
			}
			event = strings.TrimSuffix(strings.TrimPrefix(event, "Warning "), onPod)
			reason, message, _ := strings.Cut(event, " ")
			events = append(events, reason+": "+message)
		default:
			return events
		}
	}
}

func main() {
	var requests []request
	if err := json.NewDecoder(os.Stdin).Decode(&requests); err != nil {
		fmt.Fprintln(os.Stderr, "cannot read the requests:", err)
		os.Exit(2)
	}
	answers := []answer{}
	for _, r := range requests {
		recorder := &record.FakeRecorder{Events: make(chan string, 100), IncludeObject: true}
		node := &v1.ObjectReference{Kind: "Node", Name: "node", UID: "node"}
		configurer := dns.NewConfigurer(recorder, node, ips(r.NodeIPs), ips(r.ClusterDNS), r.ClusterDomain, r.ResolvConf)
		pod := r.Pod
		pod.Kind, pod.APIVersion = "Pod", "v1"
		got, err := configurer.GetPodDNS(context.Background(), &pod)
		a := answer{Servers: []string{}, Searches: []string{}, Options: []string{}}
		if err != nil {
			a.Error = err.Error()
		} else {
			a.Servers = append(a.Servers, got.Servers...)
			a.Searches = append(a.Searches, got.Searches...)
			a.Options = append(a.Options, got.Options...)
			sort.Strings(a.Options)
		}
		a.Events = podEvents(recorder)
		answers = append(answers, a)
	}
	if err := json.NewEncoder(os.Stdout).Encode(answers); err != nil {
		fmt.Fprintln(os.Stderr, "cannot write the answers:", err)
		os.Exit(2)
	}
}
