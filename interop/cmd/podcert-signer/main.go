// Command podcert-signer is the Kubernetes test suite's own signer of
// PodCertificateRequests (k8s.io/kubernetes/test/utils/
// hermeticpodcertificatesigner, unmodified) served against a cluster, and
// a checker of what a node wrote from its answers.
//
//	podcert-signer serve --kubeconfig FILE --signer-name NAME
//
// signs every PodCertificateRequest of NAME with a CA of its own (one
// intermediate: chains of two certificates), with a SPIFFE URI of the
// pod's service account, DNS names of the namespace, a lifetime of at
// most a day and beginRefreshAt half an hour before its end; it prints a
// "serving" event (see internal/events) once started, and runs until
// killed.
//
//	podcert-signer check FILE...
//
// reads each FILE as a projection's credential bundle (the private key,
// then the certificate chain, as PEM) the way a Go workload does
// (encoding/pem, x509.ParsePKCS8PrivateKey, x509.ParseCertificate) and
// prints one "bundle" event per file: the PEM block types in order, the
// key's algorithm and size, whether the leaf certificate holds the key's
// public key, and the leaf's URIs and DNS names.
package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/kubernetes/test/utils/hermeticpodcertificatesigner"
	"k8s.io/utils/clock"

	"nodeplugins/interop/internal/events"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: podcert-signer serve --kubeconfig FILE --signer-name NAME | check FILE...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		serve(os.Args[2:])
	case "check":
		for _, file := range os.Args[2:] {
			check(file)
		}
	default:
		fmt.Fprintf(os.Stderr, "podcert-signer: unknown mode %q\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(args []string) {
	flags := flag.NewFlagSet("serve", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", "", "the cluster's kubeconfig (required)")
	signerName := flags.String("signer-name", "", "the signer whose requests are signed (required)")
	_ = flags.Parse(args)
	if *kubeconfig == "" || *signerName == "" {
		fmt.Fprintln(os.Stderr, "podcert-signer serve: --kubeconfig and --signer-name are required")
		os.Exit(2)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("reading the kubeconfig", err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("making the client", err)
	}
	caKeys, caCerts, err := hermeticpodcertificatesigner.GenerateCAHierarchy(1)
	if err != nil {
		fail("making the CA", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	signer := hermeticpodcertificatesigner.New(clock.RealClock{}, *signerName, "cluster.local", caKeys, caCerts, client)
	events.Emit("serving", events.Fields{"signer": *signerName})
	signer.Run(ctx)
}

func check(file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		events.Emit("bundle", events.Fields{"file": file, "error": err.Error()})
		return
	}
	var blocks []string
	var key crypto.Signer
	var leaf *x509.Certificate
	var problems []string
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		blocks = append(blocks, block.Type)
		switch block.Type {
		case "PRIVATE KEY":
			parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				problems = append(problems, "key: "+err.Error())
				continue
			}
			signer, ok := parsed.(crypto.Signer)
			if !ok {
				problems = append(problems, fmt.Sprintf("key: %T is no signer", parsed))
				continue
			}
			key = signer
		case "CERTIFICATE":
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				problems = append(problems, "certificate: "+err.Error())
				continue
			}
			if leaf == nil {
				leaf = cert
			}
		}
	}
	fields := events.Fields{"file": file, "blocks": blocks, "problems": problems}
	if key != nil {
		fields["key"] = describe(key.Public())
	}
	if leaf != nil {
		var uris []string
		for _, u := range leaf.URIs {
			uris = append(uris, u.String())
		}
		fields["uris"] = uris
		fields["dns"] = leaf.DNSNames
		fields["leaf_key"] = describe(leaf.PublicKey)
		if key != nil {
			equal, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
			fields["matches"] = ok && equal.Equal(leaf.PublicKey)
		}
	}
	events.Emit("bundle", fields)
}

// describe names a public key's algorithm and size.
func describe(public any) string {
	switch k := public.(type) {
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case ed25519.PublicKey:
		return "Ed25519"
	default:
		return fmt.Sprintf("%T", public)
	}
}

func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "podcert-signer: %s: %v\n", what, err)
	os.Exit(1)
}
