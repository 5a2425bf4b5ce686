package checks

import (
	"fmt"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// rendered is the chart's output, decoded strictly into the Kubernetes types.
type rendered struct {
	deployments  []*appsv1.Deployment
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	secrets      []*corev1.Secret
	jobs         []*batchv1.Job
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	pdbs         []*policyv1.PodDisruptionBudget
	monitors     []*monitoringv1.ServiceMonitor
}

// splitYAML splits a multi-document YAML stream, dropping empty documents.
func splitYAML(s string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		body := strings.TrimSpace(stripComments(d))
		if body != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(d string) string {
	var keep []string
	for _, l := range strings.Split(d, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// decodeStrict decodes every document of a rendering into its type; an
// unknown kind or an unknown field fails.
func decodeStrict(t *testing.T, where, stream string) *rendered {
	t.Helper()
	r := &rendered{}
	for i, doc := range splitYAML(stream) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s: document %d: %v", where, i, err)
		}
		var obj any
		switch tm.APIVersion + "/" + tm.Kind {
		case "apps/v1/Deployment":
			o := &appsv1.Deployment{}
			r.deployments, obj = append(r.deployments, o), o
		case "apps/v1/StatefulSet":
			o := &appsv1.StatefulSet{}
			r.statefulSets, obj = append(r.statefulSets, o), o
		case "v1/Service":
			o := &corev1.Service{}
			r.services, obj = append(r.services, o), o
		case "v1/Secret":
			o := &corev1.Secret{}
			r.secrets, obj = append(r.secrets, o), o
		case "batch/v1/Job":
			o := &batchv1.Job{}
			r.jobs, obj = append(r.jobs, o), o
		case "autoscaling/v2/HorizontalPodAutoscaler":
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			r.hpas, obj = append(r.hpas, o), o
		case "policy/v1/PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			r.pdbs, obj = append(r.pdbs, o), o
		case "monitoring.coreos.com/v1/ServiceMonitor":
			o := &monitoringv1.ServiceMonitor{}
			r.monitors, obj = append(r.monitors, o), o
		default:
			t.Errorf("%s: document %d: no type known for %s %s", where, i, tm.APIVersion, tm.Kind)
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s: document %d (%s): %v", where, i, tm.Kind, err)
		}
	}
	return r
}

// podInvocation is how a container runs wahook: its args and its WAHOOK_
// environment, values from Secrets and fields replaced by placeholders.
func podInvocation(where string, c corev1.Container) invocation {
	inv := invocation{where: fmt.Sprintf("%s container %s", where, c.Name), args: append(append([]string{}, c.Command...), c.Args...), env: map[string]string{}}
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil {
			v = placeholderFor(e.Name)
		}
		inv.env[e.Name] = v
	}
	return inv
}

// placeholderFor is a value the binary accepts where a deploy file takes one
// from a Secret or the pod.
func placeholderFor(env string) string {
	switch env {
	case "WAHOOK_CLICKHOUSE_DSN":
		return "clickhouse://user:placeholder@127.0.0.1:9000/wahook"
	case "WAHOOK_NATS_URL":
		return "nats://127.0.0.1:4222"
	}
	return "placeholder-0123456789abcdef"
}
