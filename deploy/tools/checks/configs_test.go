package checks

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// The NATS config parses with nats-server's own parser into a clustered
// JetStream server, with the values its environment variables give.
func TestNATSConfig(t *testing.T) {
	t.Setenv("NATS_SERVER_NAME", "nats-2")
	t.Setenv("NATS_CLUSTER_NAME", "wahook")
	t.Setenv("NATS_STORE_DIR", "/data/jetstream")
	opts, err := server.ProcessConfigFile(deployPath("nats", "nats.conf"))
	if err != nil {
		t.Fatalf("nats.conf: %v", err)
	}
	if opts.ServerName != "nats-2" || opts.Cluster.Name != "wahook" || opts.StoreDir != "/data/jetstream" {
		t.Errorf("nats.conf: server %q cluster %q store %q, want the environment's nats-2, wahook, /data/jetstream", opts.ServerName, opts.Cluster.Name, opts.StoreDir)
	}
	if !opts.JetStream {
		t.Error("nats.conf: JetStream is off")
	}
	if opts.Port != 4222 || opts.Cluster.Port != 6222 || opts.HTTPPort != 8222 {
		t.Errorf("nats.conf: ports client %d cluster %d monitor %d, documented 4222, 6222, 8222", opts.Port, opts.Cluster.Port, opts.HTTPPort)
	}
	var routes []string
	for _, r := range opts.Routes {
		routes = append(routes, r.Host)
	}
	sort.Strings(routes)
	if strings.Join(routes, ",") != "nats-1:6222,nats-2:6222,nats-3:6222" {
		t.Errorf("nats.conf routes %v, want the 3 compose nodes", routes)
	}
	// A body of --body-limit (4 MiB by default) must fit one message.
	if opts.MaxPayload < 4<<20+64<<10 {
		t.Errorf("nats.conf: max_payload %d is below wahook's default --body-limit of 4 MiB plus headers", opts.MaxPayload)
	}
}

var fromEnvAttr = regexp.MustCompile(`from_env="([A-Z0-9_]+)"`)

func fromEnvNames(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range fromEnvAttr.FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	return names
}

// xmlWellFormed decodes every token of an XML file.
func xmlWellFormed(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	for {
		if _, err := d.Token(); err == io.EOF {
			return
		} else if err != nil {
			t.Errorf("%s: %v", path, err)
			return
		}
	}
}

// The ClickHouse configs are well-formed and describe cluster wahook of 1
// shard x 2 replicas, with macros and a Keeper.
func TestClickHouseConfig(t *testing.T) {
	files, _ := filepath.Glob(deployPath("clickhouse", "*", "*.xml"))
	if len(files) < 4 {
		t.Fatalf("deploy/clickhouse holds %d XML files", len(files))
	}
	for _, f := range files {
		xmlWellFormed(t, f)
	}
	var rs struct {
		Shards []struct {
			Internal bool `xml:"internal_replication"`
			Replicas []struct {
				Host struct {
					FromEnv string `xml:"from_env,attr"`
					Value   string `xml:",chardata"`
				} `xml:"host"`
				Port int `xml:"port"`
			} `xml:"replica"`
		} `xml:"remote_servers>wahook>shard"`
	}
	decodeXML(t, deployPath("clickhouse", "config.d", "remote_servers.xml"), &rs)
	if len(rs.Shards) != 1 || len(rs.Shards[0].Replicas) != 2 || !rs.Shards[0].Internal {
		t.Errorf("remote_servers.xml: cluster wahook is not 1 shard x 2 replicas with internal replication: %+v", rs)
	}
	for _, r := range rs.Shards[0].Replicas {
		if r.Port != 9000 || (r.Host.FromEnv == "" && r.Host.Value == "") {
			t.Errorf("remote_servers.xml: replica %+v: want a host and the native port 9000", r)
		}
	}
	var macros struct {
		Shard struct {
			FromEnv string `xml:"from_env,attr"`
		} `xml:"macros>shard"`
		Replica struct {
			FromEnv string `xml:"from_env,attr"`
		} `xml:"macros>replica"`
	}
	decodeXML(t, deployPath("clickhouse", "config.d", "macros.xml"), &macros)
	if macros.Shard.FromEnv == "" || macros.Replica.FromEnv == "" {
		t.Errorf("macros.xml: shard and replica must come from the environment: %+v", macros)
	}
	var zk struct {
		Nodes []struct {
			Port int `xml:"port"`
		} `xml:"zookeeper>node"`
	}
	decodeXML(t, deployPath("clickhouse", "config.d", "zookeeper.xml"), &zk)
	var keeper struct {
		Port int `xml:"keeper_server>tcp_port"`
	}
	decodeXML(t, deployPath("clickhouse", "keeper", "keeper.xml"), &keeper)
	if len(zk.Nodes) == 0 || zk.Nodes[0].Port != keeper.Port {
		t.Errorf("zookeeper.xml points at port %+v, Keeper listens on %d", zk.Nodes, keeper.Port)
	}
}

func decodeXML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
