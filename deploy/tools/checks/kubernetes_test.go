package checks

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The Altinity operator's and the NATS chart's Go types are not published as
// Go modules, so deploy/kubernetes is decoded strictly into the subset of
// their schemas these files use (an unknown or misspelt field fails), with
// the Kubernetes types where the schema embeds them, and the links between
// the files and wahook's values are checked.

type chTemplates struct {
	PodTemplates []struct {
		Name string         `json:"name"`
		Spec corev1.PodSpec `json:"spec"`
	} `json:"podTemplates"`
	VolumeClaimTemplates []struct {
		Name string                           `json:"name"`
		Spec corev1.PersistentVolumeClaimSpec `json:"spec"`
	} `json:"volumeClaimTemplates"`
}

type chCluster struct {
	Name   string `json:"name"`
	Layout struct {
		ShardsCount   int `json:"shardsCount"`
		ReplicasCount int `json:"replicasCount"`
	} `json:"layout"`
}

type clickHouseInstallation struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Configuration struct {
			Zookeeper struct {
				Nodes []struct {
					Host string `json:"host"`
					Port int    `json:"port"`
				} `json:"nodes"`
			} `json:"zookeeper"`
			Users    map[string]any `json:"users"`
			Clusters []chCluster    `json:"clusters"`
		} `json:"configuration"`
		Defaults struct {
			Templates struct {
				PodTemplate             string `json:"podTemplate"`
				DataVolumeClaimTemplate string `json:"dataVolumeClaimTemplate"`
			} `json:"templates"`
		} `json:"defaults"`
		Templates chTemplates `json:"templates"`
	} `json:"spec"`
}

type clickHouseKeeperInstallation struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		Configuration struct {
			Clusters []chCluster       `json:"clusters"`
			Settings map[string]string `json:"settings"`
		} `json:"configuration"`
		Defaults struct {
			Templates struct {
				PodTemplate         string `json:"podTemplate"`
				VolumeClaimTemplate string `json:"volumeClaimTemplate"`
			} `json:"templates"`
		} `json:"defaults"`
		Templates chTemplates `json:"templates"`
	} `json:"spec"`
}

type natsValues struct {
	Config struct {
		Cluster struct {
			Enabled  bool `json:"enabled"`
			Replicas int  `json:"replicas"`
		} `json:"cluster"`
		JetStream struct {
			Enabled   bool `json:"enabled"`
			FileStore struct {
				Enabled bool   `json:"enabled"`
				Dir     string `json:"dir"`
				PVC     struct {
					Enabled bool   `json:"enabled"`
					Size    string `json:"size"`
				} `json:"pvc"`
			} `json:"fileStore"`
			MemoryStore struct {
				Enabled bool `json:"enabled"`
			} `json:"memoryStore"`
		} `json:"jetstream"`
		Monitor struct {
			Enabled bool `json:"enabled"`
			Port    int  `json:"port"`
		} `json:"monitor"`
		Merge map[string]any `json:"merge"`
	} `json:"config"`
	PodTemplate struct {
		TopologySpreadConstraints map[string]map[string]any `json:"topologySpreadConstraints"`
	} `json:"podTemplate"`
	Container struct {
		Merge struct {
			Resources corev1.ResourceRequirements `json:"resources"`
		} `json:"merge"`
	} `json:"container"`
	NatsBox struct {
		Enabled bool `json:"enabled"`
	} `json:"natsBox"`
	PromExporter struct {
		Enabled bool `json:"enabled"`
	} `json:"promExporter"`
}

func decodeFileStrict(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestKubernetesManifests(t *testing.T) {
	var chi clickHouseInstallation
	decodeFileStrict(t, deployPath("kubernetes", "clickhouse-installation.yaml"), &chi)
	var chk clickHouseKeeperInstallation
	decodeFileStrict(t, deployPath("kubernetes", "clickhouse-keeper.yaml"), &chk)
	var nv natsValues
	decodeFileStrict(t, deployPath("kubernetes", "nats-values.yaml"), &nv)
	var wv struct {
		NATS struct {
			URL      string `json:"url"`
			Replicas int    `json:"replicas"`
		} `json:"nats"`
		ClickHouse struct {
			DSN string `json:"dsn"`
		} `json:"clickhouse"`
		Process struct {
			Replicas int `json:"replicas"`
		} `json:"process"`
	}
	b, err := os.ReadFile(deployPath("kubernetes", "wahook-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &wv); err != nil {
		t.Fatal(err)
	}
	var chart struct {
		ClickHouse struct {
			DSN string `json:"dsn"`
		} `json:"clickhouse"`
	}
	b, err = os.ReadFile(deployPath("helm", "wahook", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}

	if chi.APIVersion != "clickhouse.altinity.com/v1" || chi.Kind != "ClickHouseInstallation" {
		t.Errorf("clickhouse-installation.yaml: %s %s", chi.APIVersion, chi.Kind)
	}
	if chk.APIVersion != "clickhouse-keeper.altinity.com/v1" || chk.Kind != "ClickHouseKeeperInstallation" {
		t.Errorf("clickhouse-keeper.yaml: %s %s", chk.APIVersion, chk.Kind)
	}
	cl := chi.Spec.Configuration.Clusters
	if len(cl) != 1 || cl[0].Layout.ShardsCount != 1 || cl[0].Layout.ReplicasCount != 2 {
		t.Errorf("ClickHouseInstallation: clusters %+v, want one of 1 shard x 2 replicas", cl)
	}
	// The operator serves a Keeper installation as keeper-NAME, an
	// installation as clickhouse-NAME.
	keeperSvc := "keeper-" + chk.Metadata.Name
	keeperPort := chk.Spec.Configuration.Settings["keeper_server/tcp_port"]
	zk := chi.Spec.Configuration.Zookeeper.Nodes
	if len(zk) == 0 || zk[0].Host != keeperSvc || fmt.Sprint(zk[0].Port) != keeperPort {
		t.Errorf("ClickHouseInstallation's zookeeper %+v is not the Keeper's service %s:%s", zk, keeperSvc, keeperPort)
	}
	if n := chk.Spec.Configuration.Clusters; len(n) != 1 || n[0].Layout.ReplicasCount != 3 {
		t.Errorf("ClickHouseKeeperInstallation: %+v, want 3 replicas", n)
	}
	chSvc := "clickhouse-" + chi.Metadata.Name
	for name, dsn := range map[string]string{"chart values": chart.ClickHouse.DSN, "wahook-values": wv.ClickHouse.DSN} {
		if dsn == "" {
			continue
		}
		u, err := url.Parse(dsn)
		if err != nil || u.Hostname() != chSvc || u.Port() != "9000" {
			t.Errorf("%s: ClickHouse DSN %q is not the installation's service %s:9000", name, dsn, chSvc)
		}
	}
	for _, tmpl := range []struct {
		where string
		pods  string
		vols  string
		t     chTemplates
	}{
		{"ClickHouseInstallation", chi.Spec.Defaults.Templates.PodTemplate, chi.Spec.Defaults.Templates.DataVolumeClaimTemplate, chi.Spec.Templates},
		{"ClickHouseKeeperInstallation", chk.Spec.Defaults.Templates.PodTemplate, chk.Spec.Defaults.Templates.VolumeClaimTemplate, chk.Spec.Templates},
	} {
		okPod, okVol := false, false
		for _, p := range tmpl.t.PodTemplates {
			okPod = okPod || p.Name == tmpl.pods
		}
		for _, v := range tmpl.t.VolumeClaimTemplates {
			okVol = okVol || v.Name == tmpl.vols
		}
		if !okPod || !okVol {
			t.Errorf("%s: default templates %q and %q are not both defined", tmpl.where, tmpl.pods, tmpl.vols)
		}
	}

	c := nv.Config
	if !c.Cluster.Enabled || c.Cluster.Replicas != 3 || !c.JetStream.Enabled || !c.JetStream.FileStore.Enabled || !c.JetStream.FileStore.PVC.Enabled {
		t.Errorf("nats-values.yaml: want a 3-node cluster with JetStream on file storage: %+v", c)
	}
	// wahook's NATS URLs are the chart's pods (release "nats": nats-0.. behind
	// the headless service nats-headless), and its replicas fit the cluster.
	urls := strings.Split(wv.NATS.URL, ",")
	if len(urls) != c.Cluster.Replicas {
		t.Errorf("wahook-values: %d NATS URLs for %d NATS pods", len(urls), c.Cluster.Replicas)
	}
	for i, u := range urls {
		if want := fmt.Sprintf("nats://nats-%d.nats-headless:4222", i); u != want {
			t.Errorf("wahook-values: NATS URL %q, want %q", u, want)
		}
	}
	if wv.NATS.Replicas > c.Cluster.Replicas {
		t.Errorf("wahook-values: stream replicas %d on %d NATS nodes", wv.NATS.Replicas, c.Cluster.Replicas)
	}
}
