// Command etcd runs a single-member etcd from etcd's embed package, for the local control plane.
//
// Usage: etcd DATA_DIR CLIENT_URL PEER_URL
//
// It serves clients on CLIENT_URL (plain HTTP on loopback: the API server is its only client),
// writes its data under DATA_DIR, and exits on SIGTERM or SIGINT after closing the server.
package main

import (
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: etcd DATA_DIR CLIENT_URL PEER_URL")
		os.Exit(2)
	}
	cfg := embed.NewConfig()
	cfg.Name = "roxxel"
	cfg.Dir = os.Args[1]
	client, err := url.Parse(os.Args[2])
	check(err)
	peer, err := url.Parse(os.Args[3])
	check(err)
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "warn"
	// One member on one machine: no snapshot catch-up, and a test cluster's history is short.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	e, err := embed.StartEtcd(cfg)
	check(err)
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintln(os.Stderr, "etcd: ready on", client.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		fmt.Fprintln(os.Stderr, "etcd: not ready within 60 s")
		os.Exit(1)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-stop:
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		e.Close()
		os.Exit(1)
	}
	e.Close()
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcd:", err)
		os.Exit(1)
	}
}
