package checks

import (
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/wahook/wahook/internal/testutil"
	"github.com/wahook/wahook/schema/schematest"
)

// deploy/nats/nats.conf, unmodified, makes a working 3-node JetStream
// cluster on one machine the way deploy/README.md tells a launcher to run
// it: the node's name and store from the environment, ports and routes from
// nats-server's command-line flags (which win over the file). A stream of 3
// replicas, as wahook's --raw-replicas 3, is created on it.
func TestNATSClusterFromConfig(t *testing.T) {
	const nodes = 3
	clientPorts := make([]int, nodes)
	clusterPorts := make([]int, nodes)
	var routes []string
	for i := range nodes {
		clientPorts[i], clusterPorts[i] = schematest.FreePort(t), schematest.FreePort(t)
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", clusterPorts[i]))
	}
	var servers []*server.Server
	var logs []*problemLog
	for i := range nodes {
		t.Setenv("NATS_SERVER_NAME", fmt.Sprintf("nats-%d", i+1))
		t.Setenv("NATS_CLUSTER_NAME", "wahook")
		t.Setenv("NATS_STORE_DIR", t.TempDir())
		fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
		opts, err := server.ConfigureOptions(fs, []string{
			"-c", deployPath("nats", "nats.conf"),
			"-a", "127.0.0.1", "-p", fmt.Sprint(clientPorts[i]), "-m", fmt.Sprint(schematest.FreePort(t)),
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", clusterPorts[i]),
			"--routes", strings.Join(routes, ","),
		}, nil, nil, nil)
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		opts.NoSigs = true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		logs = append(logs, &problemLog{})
		s.SetLogger(logs[i], false, false)
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		servers = append(servers, s)
	}
	for i, s := range servers {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatalf("node %d not ready within 20s; its warnings and errors: %s", i+1, logs[i])
		}
		if got := s.Name(); got != fmt.Sprintf("nats-%d", i+1) {
			t.Errorf("node %d is named %q", i+1, got)
		}
	}
	nc, err := nats.Connect(servers[0].ClientURL(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream(nats.MaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyErr(t, 60*time.Second, fmt.Sprintf("a stream of %d replicas on the cluster", nodes), func() error {
		info, err := js.AddStream(&nats.StreamConfig{Name: "DEPLOY_CHECK", Subjects: []string{"deploy.check"}, Replicas: nodes, Storage: nats.FileStorage})
		if err == nil && (info.Cluster == nil || info.Cluster.Name != "wahook" || len(info.Cluster.Replicas) != nodes-1) {
			t.Fatalf("stream of %d replicas: cluster %+v", nodes, info.Cluster)
		}
		return err
	})
	if _, err := js.Publish("deploy.check", []byte("stored on 3 nodes")); err != nil {
		t.Fatalf("publish to the replicated stream: %v", err)
	}
}

// problemLog keeps a nats-server's warnings and errors, for a failure's
// message (a listener that cannot bind is only logged).
type problemLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *problemLog) keep(level, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+" "+fmt.Sprintf(format, v...))
}

func (l *problemLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return "none"
	}
	return strings.Join(l.lines, "; ")
}

func (l *problemLog) Noticef(string, ...any)         {}
func (l *problemLog) Debugf(string, ...any)          {}
func (l *problemLog) Tracef(string, ...any)          {}
func (l *problemLog) Warnf(format string, v ...any)  { l.keep("[WRN]", format, v...) }
func (l *problemLog) Errorf(format string, v ...any) { l.keep("[ERR]", format, v...) }
func (l *problemLog) Fatalf(format string, v ...any) { l.keep("[FTL]", format, v...) }
