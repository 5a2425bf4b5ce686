package checks

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func chartDir() string { return deployPath("helm", "wahook") }

// helmSecretKeys are the chart's secrets.* values whose defaults are
// CHANGE-ME placeholders, which the chart refuses to render.
var helmSecretKeys = []string{"appSecret", "verifyToken", "apiToken", "phoneHashKey"}

// helmSecrets sets every secrets.* value to a test value, as an install
// without existingSecret must.
func helmSecrets(args ...string) []string {
	out := []string{
		"--set", "secrets.appSecret=deploy-checks-app-secret",
		"--set", "secrets.verifyToken=deploy-checks-verify-token",
		"--set", "secrets.apiToken=" + liveToken,
		"--set", "secrets.phoneHashKey=deploy-checks-phone-hash-key",
	}
	return append(out, args...)
}

// helmCases are the renderings the tests check: the chart's defaults (with
// the secrets set), the cluster values of deploy/kubernetes, one process
// with ServiceMonitors, and a migrate Job given extra flags.
var helmCases = []struct {
	name string
	args []string
	// secrets rendered elsewhere (an existing Secret) and its keys
	external map[string][]string
}{
	{name: "default", args: helmSecrets()},
	{name: "cluster", args: []string{"-f", deployPath("kubernetes", "wahook-values.yaml")},
		external: map[string][]string{"wahook": {"app-secret", "verify-token", "api-token", "phone-hash-key", "clickhouse-dsn"}}},
	{name: "single-process-monitored", args: helmSecrets("--set", "process.replicas=1", "--set", "serviceMonitor.enabled=true", "--set", "ingest.hpa.enabled=false", "--set", "secrets.clickhouseDSN=clickhouse://u:p@ch:9000/wahook", "--set", "nats.credsSecret=nats-creds")},
	{name: "migrate-extra-args", args: helmSecrets(migrateExtraArgs...)},
	{name: "api-pacing-without-send-results", args: helmSecrets("--set", "api.sendResults=false", "--set", "nats.credsSecret=nats-creds")},
	{name: "dsn-from-chart-secret", args: helmSecrets("--set", "clickhouse.dsnFromSecret=true", "--set", "secrets.clickhouseDSN=clickhouse://u:p@ch:9000/wahook")},
}

// migrateExtraArgs: an ack timeout over the RAW stream's default duplicate
// window of 2 s, with the window raised to match (ingest and migrate both
// refuse a window shorter than the ack timeout), and a stream sizing flag
// in migrate.extraArgs.
var migrateExtraArgs = []string{"--set", "ingest.ackTimeout=5s", "--set", "ingest.rawDuplicateWindow=5s", "--set-json", `migrate.extraArgs=["--raw-max-age=72h"]`}

func TestHelmLint(t *testing.T) {
	helm := tool(t, "helm")
	mustRun(t, 2*time.Minute, repoRoot, helm, append([]string{"lint", "--strict", chartDir()}, helmSecrets()...)...)
	mustRun(t, 2*time.Minute, repoRoot, helm, "lint", "--strict", chartDir(), "-f", deployPath("kubernetes", "wahook-values.yaml"))
}

// The chart refuses to render with a secret still at its public CHANGE-ME
// placeholder (the default, or one element of a list), and names the value
// to set; an existing Secret needs none of them.
func TestHelmRefusesPlaceholderSecrets(t *testing.T) {
	helm := tool(t, "helm")
	template := func(args ...string) (string, error) {
		return run(t, 2*time.Minute, repoRoot, nil, helm, append([]string{"template", "wahook", chartDir()}, args...)...)
	}
	out, err := template()
	if err == nil || !strings.Contains(out, "secrets.appSecret is still a CHANGE-ME placeholder") {
		t.Errorf("helm template with the default secrets: err %v, want a refusal naming secrets.appSecret:\n%s", err, out)
	}
	for _, key := range append(helmSecretKeys, "clickhouseDSN") {
		// Each 16 bytes or more, which the phone hash key's schema asks.
		for _, v := range []string{"CHANGE-ME-xxxxxxxx", `real-secret-0123456789\,CHANGE-ME-x`, `app=CHANGE-ME-xxxxxxxx`} {
			out, err := template(helmSecrets("--set", "secrets."+key+"="+v)...)
			if err == nil || !strings.Contains(out, "secrets."+key+" is still a CHANGE-ME placeholder") {
				t.Errorf("helm template with secrets.%s=%s: err %v, want a refusal naming it:\n%s", key, v, err, out)
			}
		}
	}
	if out, err := template("--set", "existingSecret=wahook"); err != nil {
		t.Errorf("helm template with existingSecret and the placeholders unused: %v\n%s", err, out)
	}
}

// clickhouse.dsnFromSecret without a DSN in the chart's Secret
// (secrets.clickhouseDSN) or an existing Secret is refused, naming the
// values to set: the pods read the key clickhouse-dsn, which the chart's
// Secret has only from secrets.clickhouseDSN, and a pod naming a missing
// key never starts (CreateContainerConfigError).
func TestHelmRefusesDSNFromSecretWithoutKey(t *testing.T) {
	helm := tool(t, "helm")
	template := func(args ...string) (string, error) {
		return run(t, 2*time.Minute, repoRoot, nil, helm, append([]string{"template", "wahook", chartDir()}, helmSecrets(args...)...)...)
	}
	out, err := template("--set", "clickhouse.dsnFromSecret=true")
	if err == nil || !strings.Contains(out, "clickhouse.dsnFromSecret is true, but secrets.clickhouseDSN is empty") {
		t.Errorf("helm template with clickhouse.dsnFromSecret and no DSN in a Secret: err %v, want a refusal naming secrets.clickhouseDSN:\n%s", err, out)
	}
	for _, ok := range [][]string{
		{"--set", "clickhouse.dsnFromSecret=true", "--set", "secrets.clickhouseDSN=clickhouse://u:p@ch:9000/wahook"},
		{"--set", "clickhouse.dsnFromSecret=true", "--set", "existingSecret=wahook"},
		{"--set", "clickhouse.dsnFromSecret=false"},
	} {
		if out, err := template(ok...); err != nil {
			t.Errorf("helm template %v: %v\n%s", ok, err, out)
		}
	}
}

// The api gets NATS whenever it serves send results or the pacing signals
// (/api/v1/pacing and its stream answer 503 without it): with
// api.sendResults=false it runs with --send-results=false and still has
// NATS and its credentials; only with api.pacing=false too does it run
// without NATS.
func TestHelmAPINATS(t *testing.T) {
	helm := tool(t, "helm")
	for _, c := range []struct {
		name        string
		args        []string
		nats        bool
		sendResults string // --send-results in wahook api's effective configuration
	}{
		{"defaults", nil, true, "true"},
		{"send results off", []string{"--set", "api.sendResults=false"}, true, "false"},
		{"send results and pacing off", []string{"--set", "api.sendResults=false", "--set", "api.pacing=false"}, false, "false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := mustRun(t, 2*time.Minute, repoRoot, helm, append([]string{"template", "wahook", chartDir()}, helmSecrets(append(c.args, "--set", "nats.credsSecret=nats-creds")...)...)...)
			r := decodeStrict(t, "helm template "+c.name, out)
			found := false
			for _, d := range r.deployments {
				for _, ct := range d.Spec.Template.Spec.Containers {
					if len(ct.Args) == 0 || ct.Args[0] != "api" {
						continue
					}
					found = true
					inv := podInvocation("Deployment "+d.Name, ct)
					if dump := checkInvocation(t, inv); dump != nil && dump["send-results"].value != c.sendResults {
						t.Errorf("%s: wahook api runs with --send-results=%s, want %s", d.Name, dump["send-results"].value, c.sendResults)
					}
					_, url := inv.env["WAHOOK_NATS_URL"]
					_, creds := inv.env["WAHOOK_NATS_CREDS"]
					mounted := false
					for _, m := range ct.VolumeMounts {
						mounted = mounted || m.Name == "nats-creds"
					}
					if url != c.nats || creds != c.nats || mounted != c.nats {
						t.Errorf("%s: WAHOOK_NATS_URL %v, WAHOOK_NATS_CREDS %v, creds mounted %v; want NATS %v", d.Name, url, creds, mounted, c.nats)
					}
				}
			}
			if !found {
				t.Fatal("no api Deployment rendered")
			}
		})
	}
}

// migrate.extraArgs reaches the migrate Job, and only it. An ack timeout
// over 2 s with ingest.rawDuplicateWindow raised to match renders flags that
// both wahook migrate and wahook ingest accept; with the window left at 2 s
// (raised in migrate.extraArgs alone, as the chart once said to) ingest
// refused to start, every pod of it, and the chart now refuses to render.
func TestHelmMigrateExtraArgs(t *testing.T) {
	helm := tool(t, "helm")
	out := mustRun(t, 2*time.Minute, repoRoot, helm, append([]string{"template", "wahook", chartDir()}, helmSecrets(migrateExtraArgs...)...)...)
	r := decodeStrict(t, "helm template with migrate.extraArgs", out)
	if len(r.jobs) != 1 || len(r.jobs[0].Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one migrate Job with one container, got %d Jobs", len(r.jobs))
	}
	check := func(what string, inv invocation) {
		t.Helper()
		var env []string
		for k, v := range inv.env {
			env = append(env, k+"="+v)
		}
		if out, err := run(t, time.Minute, binDir, cleanEnv(env), wahookBinary(t), append(append([]string{}, inv.args...), "--check")...); err != nil {
			t.Errorf("%s: wahook %s --check: %v\n%s", what, strings.Join(inv.args, " "), err, out)
		}
	}
	job := podInvocation("Job "+r.jobs[0].Name, r.jobs[0].Spec.Template.Spec.Containers[0])
	if got := strings.Join(job.args, " "); !strings.Contains(got, "--raw-duplicate-window=5s") || !strings.Contains(got, "--raw-max-age=72h") {
		t.Errorf("migrate args %q: want the window and the extra flag", got)
	}
	check("the migrate Job", job)
	ingested := false
	for _, d := range r.deployments {
		for _, ct := range d.Spec.Template.Spec.Containers {
			if strings.Contains(strings.Join(ct.Args, " "), "--raw-max-age") {
				t.Errorf("Deployment %s gets migrate.extraArgs: %v", d.Name, ct.Args)
			}
			if len(ct.Args) > 0 && ct.Args[0] == "ingest" {
				ingested = true
				check("Deployment "+d.Name, podInvocation("Deployment "+d.Name, ct))
			}
		}
	}
	if !ingested {
		t.Error("no ingest Deployment rendered")
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"the window raised for migrate only", []string{"--set", "ingest.ackTimeout=5s", "--set-json", `migrate.extraArgs=["--raw-duplicate-window=5s"]`}, "ingest.rawDuplicateWindow"},
		{"more process replicas than partitions", []string{"--set", "process.replicas=5", "--set", "process.stage2Partitions=4"}, "process.stage2Partitions (4)"},
	} {
		out, err := run(t, 2*time.Minute, repoRoot, nil, helm, append([]string{"template", "wahook", chartDir()}, helmSecrets(c.args...)...)...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("helm template with %s: err %v, want a refusal naming %s:\n%s", c.name, err, c.want, out)
		}
	}
}

func TestHelmTemplate(t *testing.T) {
	helm := tool(t, "helm")
	for _, c := range helmCases {
		t.Run(c.name, func(t *testing.T) {
			out := mustRun(t, 2*time.Minute, repoRoot, helm, append([]string{"template", "wahook", chartDir(), "--namespace", "wahook"}, c.args...)...)
			r := decodeStrict(t, "helm template "+c.name, out)
			checkRendered(t, r, c.external)
		})
	}
}

// spreadComponents are the components whose pods the chart spreads over
// nodes by default: ingest's replicas, process's stage 2 group (a
// StatefulSet) and the api.
var spreadComponents = []string{"ingest", "process", "api"}

// componentWorkload is a rendered workload of one component: its selector
// and its pod template's labels and affinity.
type componentWorkload struct {
	where    string
	selector map[string]string
	labels   map[string]string
	affinity *corev1.Affinity
}

// componentWorkloads are the rendered Deployments and StatefulSets by their
// pods' app.kubernetes.io/component label.
func componentWorkloads(t *testing.T, r *rendered) map[string]componentWorkload {
	t.Helper()
	out := map[string]componentWorkload{}
	add := func(w componentWorkload) {
		comp := w.labels["app.kubernetes.io/component"]
		if _, dup := out[comp]; dup {
			t.Errorf("two workloads of component %q: %s and %s", comp, out[comp].where, w.where)
		}
		out[comp] = w
	}
	for _, d := range r.deployments {
		add(componentWorkload{"Deployment " + d.Name, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels, d.Spec.Template.Spec.Affinity})
	}
	for _, s := range r.statefulSets {
		add(componentWorkload{"StatefulSet " + s.Name, s.Spec.Selector.MatchLabels, s.Spec.Template.Labels, s.Spec.Template.Spec.Affinity})
	}
	return out
}

// checkDefaultAntiAffinity: w's pods prefer, and only prefer, a node
// without another pod of their own workload (its selector, which matches no
// other component's pods), so that one node's loss does not take all of
// them while a one-node cluster still schedules them.
func checkDefaultAntiAffinity(t *testing.T, w componentWorkload, all map[string]componentWorkload) {
	t.Helper()
	if w.affinity == nil || w.affinity.PodAntiAffinity == nil {
		t.Errorf("%s: no podAntiAffinity: its replicas may all land on one node (affinity %+v)", w.where, w.affinity)
		return
	}
	anti := w.affinity.PodAntiAffinity
	if len(anti.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("%s: a required podAntiAffinity by default: replicas beyond the node count never schedule (a one-node cluster runs one)", w.where)
	}
	found := false
	for _, term := range anti.PreferredDuringSchedulingIgnoredDuringExecution {
		pt := term.PodAffinityTerm
		if pt.TopologyKey != "kubernetes.io/hostname" || pt.LabelSelector == nil || term.Weight <= 0 {
			continue
		}
		sel := pt.LabelSelector
		if len(sel.MatchExpressions) != 0 || !maps.Equal(sel.MatchLabels, w.selector) {
			t.Errorf("%s: podAntiAffinity on kubernetes.io/hostname selects %v %v, the workload's pods are %v", w.where, sel.MatchLabels, sel.MatchExpressions, w.selector)
			continue
		}
		if !selects(sel.MatchLabels, w.labels) {
			t.Errorf("%s: podAntiAffinity selects %v, which its own pods (%v) do not match", w.where, sel.MatchLabels, w.labels)
			continue
		}
		for comp, other := range all {
			if other.where != w.where && selects(sel.MatchLabels, other.labels) {
				t.Errorf("%s: podAntiAffinity selects the pods of %s (%s) too", w.where, other.where, comp)
			}
		}
		found = true
	}
	if !found {
		t.Errorf("%s: no preferred podAntiAffinity on kubernetes.io/hostname against its own pods: %+v", w.where, anti)
	}
}

// By default ingest, process and api each prefer nodes that run no other pod
// of their own (a podAntiAffinity on kubernetes.io/hostname with the
// workload's selector, under any release name); an affinity the user gives
// replaces that default whole, for its component only.
func TestHelmAntiAffinity(t *testing.T) {
	helm := tool(t, "helm")
	render := func(release string, args ...string) map[string]componentWorkload {
		t.Helper()
		out := mustRun(t, 2*time.Minute, repoRoot, helm, append([]string{"template", release, chartDir()}, helmSecrets(args...)...)...)
		r := decodeStrict(t, "helm template "+release+" "+strings.Join(args, " "), out)
		return componentWorkloads(t, r)
	}
	for _, release := range []string{"wahook", "other"} {
		all := render(release)
		for _, comp := range spreadComponents {
			w, ok := all[comp]
			if !ok {
				t.Errorf("release %s: no %s workload rendered", release, comp)
				continue
			}
			checkDefaultAntiAffinity(t, w, all)
		}
	}

	// A node affinity, and an empty podAntiAffinity (the way to turn the
	// spreading off): each replaces the default, with nothing of it left.
	for _, user := range []string{
		`{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"pool","operator":"In","values":["wahook"]}]}]}}}`,
		`{"podAntiAffinity":{}}`,
	} {
		var want corev1.Affinity
		if err := json.Unmarshal([]byte(user), &want); err != nil {
			t.Fatal(err)
		}
		for _, comp := range spreadComponents {
			all := render("wahook", "--set-json", comp+".affinity="+user)
			for _, other := range spreadComponents {
				w, ok := all[other]
				if !ok {
					t.Errorf("%s.affinity=%s: no %s workload rendered", comp, user, other)
					continue
				}
				if other != comp {
					checkDefaultAntiAffinity(t, w, all)
					continue
				}
				if w.affinity == nil || !reflect.DeepEqual(*w.affinity, want) {
					t.Errorf("%s.affinity=%s: %s renders affinity %+v, want the value as given, without the default", comp, user, w.where, w.affinity)
				}
			}
		}
	}
}

// A ClickHouse cluster cannot be set until wahook has a flag for it.
// TestHelmClickHouseCluster: clickhouse.cluster reaches migrate and process
// (the commands that have --clickhouse-cluster) and no other container.
func TestHelmClickHouseCluster(t *testing.T) {
	helm := tool(t, "helm")
	out, err := run(t, 2*time.Minute, repoRoot, nil, helm, append([]string{"template", "wahook", chartDir(), "--set", "clickhouse.cluster=wahook"}, helmSecrets()...)...)
	if err != nil {
		t.Fatalf("helm template with clickhouse.cluster set: %v\n%s", err, out)
	}
	// Each rendered document: its kind and name, and whether it sets the variable.
	got := map[string]bool{}
	for _, doc := range strings.Split(out, "\n---") {
		if !strings.Contains(doc, "containers:") {
			continue
		}
		var name string
		for _, line := range strings.Split(doc, "\n") {
			if v, ok := strings.CutPrefix(line, "  name: "); ok && name == "" {
				name = strings.TrimSpace(v)
			}
		}
		got[name] = strings.Contains(doc, "name: WAHOOK_CLICKHOUSE_CLUSTER\n") && strings.Contains(doc, `value: "wahook"`)
	}
	for name, set := range got {
		want := strings.HasSuffix(name, "-process") || strings.HasSuffix(name, "-migrate")
		if set != want {
			t.Errorf("%s: WAHOOK_CLICKHOUSE_CLUSTER set %v, want %v", name, set, want)
		}
	}
	if len(got) < 4 {
		t.Errorf("found the containers of %v only", got)
	}
}

type podOwner struct {
	kind, name string
	labels     map[string]string
	spec       corev1.PodSpec
	replicas   int
}

func checkRendered(t *testing.T, r *rendered, external map[string][]string) {
	t.Helper()
	secretKeys := map[string]map[string]bool{}
	for name, keys := range external {
		secretKeys[name] = map[string]bool{}
		for _, k := range keys {
			secretKeys[name][k] = true
		}
	}
	for _, s := range r.secrets {
		secretKeys[s.Name] = map[string]bool{}
		for k := range s.StringData {
			secretKeys[s.Name][k] = true
		}
		for k := range s.Data {
			secretKeys[s.Name][k] = true
		}
	}
	var pods []podOwner
	for _, d := range r.deployments {
		n := 1
		if d.Spec.Replicas != nil {
			n = int(*d.Spec.Replicas)
		}
		pods = append(pods, podOwner{"Deployment", d.Name, d.Spec.Template.Labels, d.Spec.Template.Spec, n})
	}
	for _, s := range r.statefulSets {
		pods = append(pods, podOwner{"StatefulSet", s.Name, s.Spec.Template.Labels, s.Spec.Template.Spec, int(*s.Spec.Replicas)})
	}
	for _, j := range r.jobs {
		pods = append(pods, podOwner{"Job", j.Name, j.Spec.Template.Labels, j.Spec.Template.Spec, 1})
		// Kubernetes ends the Job at its deadline: wahook migrate's own
		// budget must end first, so that it fails with its own error.
		budget := migrateBudget(t)
		if d := j.Spec.ActiveDeadlineSeconds; d != nil && time.Duration(*d)*time.Second < budget+time.Minute {
			t.Errorf("Job %s: activeDeadlineSeconds %d is not a minute over wahook migrate's own budget of %v (cmd/wahook/migrate.go): Kubernetes kills a slow migration before it reports its error", j.Name, *d, budget)
		}
	}
	subs := map[string]bool{}
	metricsPorts := map[string]string{} // workload -> port of its /metrics
	for _, p := range pods {
		where := p.kind + " " + p.name
		for _, c := range p.spec.Containers {
			inv := podInvocation(where, c)
			dump := checkInvocation(t, inv)
			sub := inv.args[0]
			subs[sub] = true
			checkSecretRefs(t, where, c, secretKeys)
			if dump == nil {
				continue
			}
			if lf, ok := listenFlag[sub]; ok {
				checkPorts(t, where, c, listenPort(dump[lf].value))
				mp := metricsPort(sub, dump)
				if !declaresPort(c, mp) {
					t.Errorf("%s: wahook %s serves /metrics on %s, the container declares no such port", where, sub, mp)
				}
				metricsPorts[p.kind+"/"+p.name] = mp
			}
			if sub == "ingest" {
				checkShutdown(t, where, p.spec, c, dump["shutdown-delay"].value)
			}
			if sub == "process" {
				checkStage2(t, p, c, dump)
			}
		}
	}
	for _, want := range []string{"ingest", "process", "migrate"} {
		if !subs[want] {
			t.Errorf("no workload runs wahook %s", want)
		}
	}
	svcPorts := map[string]map[string]bool{}
	svcTarget := map[string]*podOwner{}
	for _, s := range r.services {
		var target *podOwner
		for i := range pods {
			if selects(s.Spec.Selector, pods[i].labels) {
				target = &pods[i]
			}
		}
		if target == nil {
			t.Errorf("Service %s selects no workload's pods", s.Name)
			continue
		}
		svcPorts[s.Name] = map[string]bool{}
		svcTarget[s.Name] = target
		for _, sp := range s.Spec.Ports {
			svcPorts[s.Name][sp.Name] = true
			if !containerHasPort(target.spec, sp.TargetPort) {
				t.Errorf("Service %s port %s: target port %s is no container port of %s %s", s.Name, sp.Name, sp.TargetPort.String(), target.kind, target.name)
			}
		}
	}
	for _, m := range r.monitors {
		found := false
		for _, s := range r.services {
			if selects(m.Spec.Selector.MatchLabels, s.Labels) {
				found = true
				for _, ep := range m.Spec.Endpoints {
					if !svcPorts[s.Name][ep.Port] {
						t.Errorf("ServiceMonitor %s: port %q is not a port of Service %s", m.Name, ep.Port, s.Name)
					}
					if got, want := servicePortTarget(s, ep.Port, svcTarget[s.Name]), metricsPorts[svcTarget[s.Name].kind+"/"+svcTarget[s.Name].name]; got != want {
						t.Errorf("ServiceMonitor %s: port %q reaches container port %s of %s, wahook serves /metrics on %s", m.Name, ep.Port, got, svcTarget[s.Name].name, want)
					}
					if ep.Path != "/metrics" {
						t.Errorf("ServiceMonitor %s: path %q, wahook serves /metrics", m.Name, ep.Path)
					}
				}
			}
		}
		if !found {
			t.Errorf("ServiceMonitor %s selects no Service", m.Name)
		}
	}
	for _, h := range r.hpas {
		ok := false
		for _, d := range r.deployments {
			ok = ok || (h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == d.Name)
		}
		if !ok {
			t.Errorf("HorizontalPodAutoscaler %s scales %s %s, which is not rendered", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
	}
	for _, b := range r.pdbs {
		ok := false
		for _, p := range pods {
			ok = ok || (p.kind == "Deployment" && selects(b.Spec.Selector.MatchLabels, p.labels))
		}
		if !ok {
			t.Errorf("PodDisruptionBudget %s selects no Deployment's pods", b.Name)
		}
	}
}

func selects(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func containerHasPort(spec corev1.PodSpec, p intstr.IntOrString) bool {
	for _, c := range spec.Containers {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return true
			}
		}
	}
	return false
}

func checkSecretRefs(t *testing.T, where string, c corev1.Container, secrets map[string]map[string]bool) {
	t.Helper()
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		keys, ok := secrets[ref.Name]
		switch {
		case !ok:
			t.Errorf("%s: %s from Secret %s, which is neither rendered nor the existing Secret", where, e.Name, ref.Name)
		case !keys[ref.Key]:
			t.Errorf("%s: %s from key %s of Secret %s, which has no such key", where, e.Name, ref.Key, ref.Name)
		}
	}
}

// checkPorts: the container serves on the port of its listen flag, and its
// probes ask that port for /healthz (liveness) and /readyz (readiness).
func checkPorts(t *testing.T, where string, c corev1.Container, port string) {
	t.Helper()
	want, err := strconv.Atoi(port)
	if err != nil {
		t.Errorf("%s: listen port %q is not a number", where, port)
		return
	}
	byName := map[string]int32{}
	found := false
	for _, cp := range c.Ports {
		byName[cp.Name] = cp.ContainerPort
		found = found || int(cp.ContainerPort) == want
	}
	if !found {
		t.Errorf("%s: wahook listens on %d, the container declares no such port (%v)", where, want, c.Ports)
	}
	for name, pr := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if pr == nil || pr.HTTPGet == nil {
			t.Errorf("%s: no HTTP %s probe", where, name)
			continue
		}
		wantPath := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[name]
		if pr.HTTPGet.Path != wantPath {
			t.Errorf("%s: %s probe asks %s, wahook serves it on %s", where, name, pr.HTTPGet.Path, wantPath)
		}
		got := pr.HTTPGet.Port.IntVal
		if pr.HTTPGet.Port.Type == intstr.String {
			got = byName[pr.HTTPGet.Port.StrVal]
		}
		if int(got) != want {
			t.Errorf("%s: %s probe on port %s (%d), wahook listens on %d", where, name, pr.HTTPGet.Port.String(), got, want)
		}
	}
}

// checkShutdown: readiness fails within --shutdown-delay, and the grace
// period covers the delay and then some for the requests in flight.
func checkShutdown(t *testing.T, where string, spec corev1.PodSpec, c corev1.Container, delay string) {
	t.Helper()
	d, err := time.ParseDuration(delay)
	if err != nil || d <= 0 {
		t.Errorf("%s: --shutdown-delay %q: want a positive duration so that /readyz fails before the listener closes", where, delay)
		return
	}
	if spec.TerminationGracePeriodSeconds == nil || time.Duration(*spec.TerminationGracePeriodSeconds)*time.Second < d+5*time.Second {
		t.Errorf("%s: terminationGracePeriodSeconds %v does not cover --shutdown-delay %v and 5 s to finish requests", where, spec.TerminationGracePeriodSeconds, d)
	}
	if p := c.ReadinessProbe; p != nil && time.Duration(p.PeriodSeconds*p.FailureThreshold)*time.Second >= d {
		t.Errorf("%s: readiness notices a shutdown after %d s, not within --shutdown-delay %v", where, p.PeriodSeconds*p.FailureThreshold, d)
	}
}

// checkStage2: several process pods form one stage 2 group whose members are
// the StatefulSet's pod names.
func checkStage2(t *testing.T, p podOwner, c corev1.Container, dump map[string]flagInfo) {
	t.Helper()
	where := p.kind + " " + p.name
	if p.replicas <= 1 {
		if dump["stage2-partitions"].value != "0" {
			t.Errorf("%s: one process with --stage2-partitions %s", where, dump["stage2-partitions"].value)
		}
		return
	}
	if p.kind != "StatefulSet" {
		t.Errorf("%s: several process pods need stable names: a StatefulSet", where)
	}
	if n, _ := strconv.Atoi(dump["stage2-partitions"].value); n < 1 {
		t.Errorf("%s: %d process pods without --stage2-partitions", where, p.replicas)
	}
	var want []string
	for i := 0; i < p.replicas; i++ {
		want = append(want, fmt.Sprintf("%s-%d", p.name, i))
	}
	if got := dump["stage2-members"].value; got != strings.Join(want, ",") {
		t.Errorf("%s: --stage2-members %q, the pods are %q", where, got, strings.Join(want, ","))
	}
	ok := false
	for _, e := range c.Env {
		ok = ok || (e.Name == envName("stage2-member") && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name")
	}
	if !ok {
		t.Errorf("%s: %s is not the pod's name", where, envName("stage2-member"))
	}
}

// values.schema.json refuses a misspelt value instead of ignoring it.
// TestHelmRefusesShortPhoneHashKey: a phone hash key under 16 bytes is
// refused when the chart renders, naming the value: wahook refuses it as a
// new database's key, and the pods would only exit 2, again and again.
func TestHelmRefusesShortPhoneHashKey(t *testing.T) {
	helm := tool(t, "helm")
	out, err := run(t, 2*time.Minute, repoRoot, nil, helm, append([]string{"template", "wahook", chartDir()}, helmSecrets("--set", "secrets.phoneHashKey=changeme")...)...)
	if err == nil || !strings.Contains(out, "phoneHashKey") {
		t.Fatalf("helm template with a phone hash key of 8 bytes: err %v, want the schema to refuse it:\n%s", err, out)
	}
	if _, err := run(t, 2*time.Minute, repoRoot, nil, helm, append([]string{"template", "wahook", chartDir()}, helmSecrets("--set", "secrets.phoneHashKey=0123456789abcdef")...)...); err != nil {
		t.Fatalf("helm template with a phone hash key of 16 bytes: %v", err)
	}
}

func TestHelmRefusesUnknownValue(t *testing.T) {
	helm := tool(t, "helm")
	out, err := run(t, 2*time.Minute, repoRoot, nil, helm, append([]string{"template", "wahook", chartDir(), "--set", "ingest.replica=3"}, helmSecrets()...)...)
	if err == nil || !strings.Contains(out, "replica") {
		t.Fatalf("helm template with ingest.replica (for replicas): err %v, want the schema to refuse it:\n%s", err, out)
	}
}

func declaresPort(c corev1.Container, port string) bool {
	for _, cp := range c.Ports {
		if fmt.Sprint(cp.ContainerPort) == port {
			return true
		}
	}
	return false
}

// servicePortTarget is the container port number a Service port (by name)
// reaches in the pods of target.
func servicePortTarget(s *corev1.Service, name string, target *podOwner) string {
	if target == nil {
		return ""
	}
	for _, sp := range s.Spec.Ports {
		if sp.Name != name {
			continue
		}
		for _, c := range target.spec.Containers {
			for _, cp := range c.Ports {
				if (sp.TargetPort.Type == intstr.String && cp.Name == sp.TargetPort.StrVal) || (sp.TargetPort.Type == intstr.Int && cp.ContainerPort == sp.TargetPort.IntVal) {
					return fmt.Sprint(cp.ContainerPort)
				}
			}
		}
	}
	return ""
}

// migrateBudget is how long wahook migrate may run by its own timeouts, as
// cmd/wahook/migrate.go sets them: natsTimeout for the streams and buckets,
// then migrateTimeout for ClickHouse.
func migrateBudget(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "cmd", "wahook", "migrate.go"))
	if err != nil {
		t.Fatal(err)
	}
	var total time.Duration
	for _, name := range []string{"natsTimeout", "migrateTimeout"} {
		m := regexp.MustCompile(`\b` + name + `\s*=\s*(\d+)\s*\*\s*time\.(Minute|Second)\b`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("cmd/wahook/migrate.go: no %s = N * time.Minute (or time.Second) to read wahook migrate's budget from", name)
		}
		n, _ := strconv.Atoi(string(m[1]))
		unit := time.Minute
		if string(m[2]) == "Second" {
			unit = time.Second
		}
		total += time.Duration(n) * unit
	}
	return total
}
