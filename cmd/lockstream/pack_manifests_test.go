package main

import (
	"bytes"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/lockstream/lockstream/internal/settings"
)

// packTools are the tools of the command table: every other subcommand is a
// daemon and needs a Deployment.
var packTools = []string{"migrate", "all", "simulate", "bench", "config", "fake-swrve", "webhook-sink"}

// k8sObjects are the manifests of deploy/k8s, decoded.
type k8sObjects struct {
	deployments []appsv1.Deployment
	jobs        []batchv1.Job
	services    []corev1.Service
	configMaps  []corev1.ConfigMap
	pdbs        []policyv1.PodDisruptionBudget
	// secretDoc is the comment of configmap.yaml that tells how to create the Secret.
	secretDoc string
}

// decodeManifests decodes every document of deploy/k8s/*.yaml strictly (an unknown
// or misspelt field is an error) into the Kubernetes API type its kind names.
func decodeManifests(t *testing.T) k8sObjects {
	t.Helper()
	files, err := filepath.Glob(packPath("k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/k8s: %v", err)
	}
	var objs k8sObjects
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(file) == "configmap.yaml" {
			objs.secretDoc = string(raw)
		}
		for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
			where := fmt.Sprintf("%s document %d", filepath.Base(file), i+1)
			if err := objs.decode(doc); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		}
	}
	return objs
}

func (o *k8sObjects) decode(doc []byte) error {
	var tm metav1.TypeMeta
	if err := k8syaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	strict := func(into any) error { return k8syaml.UnmarshalStrict(doc, into) }
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		o.deployments = append(o.deployments, appsv1.Deployment{})
		return strict(&o.deployments[len(o.deployments)-1])
	case "batch/v1 Job":
		o.jobs = append(o.jobs, batchv1.Job{})
		return strict(&o.jobs[len(o.jobs)-1])
	case "v1 Service":
		o.services = append(o.services, corev1.Service{})
		return strict(&o.services[len(o.services)-1])
	case "v1 ConfigMap":
		o.configMaps = append(o.configMaps, corev1.ConfigMap{})
		return strict(&o.configMaps[len(o.configMaps)-1])
	case "policy/v1 PodDisruptionBudget":
		o.pdbs = append(o.pdbs, policyv1.PodDisruptionBudget{})
		return strict(&o.pdbs[len(o.pdbs)-1])
	}
	return fmt.Errorf("kind %q of %q is not one the pack uses", tm.Kind, tm.APIVersion)
}

// commandSettings returns, by subcommand, the environment variables it reads.
func commandSettings() map[string][]string {
	out := map[string][]string{}
	for _, c := range commands() {
		if c.setup == nil {
			continue
		}
		s, _, _ := setupCommand(c, flag.NewFlagSet(c.name, flag.ContinueOnError))
		out[c.name] = []string{}
		for _, r := range s.Rows() {
			out[c.name] = append(out[c.name], r.Variable)
		}
	}
	return out
}

// TestOpsPackManifests decodes deploy/k8s strictly into the Kubernetes API types and
// checks them against the binary: a Deployment per daemon of the command table, each
// running a real subcommand with real settings, probes on /healthz and /readyz of a
// port the settings make it listen on, resource requests, Services and
// PodDisruptionBudgets that select real pods.
func TestOpsPackManifests(t *testing.T) {
	t.Parallel()
	objs := decodeManifests(t)
	settings := commandSettings()
	config := map[string]string{}
	for _, cm := range objs.configMaps {
		if cm.Name == "lockstream-config" {
			config = cm.Data
		}
	}
	daemonEnvs := map[string]bool{}
	for name, envs := range settings {
		if !slices.Contains(packTools, name) {
			for _, env := range envs {
				daemonEnvs[env] = true
			}
		}
	}
	for k := range config {
		if !daemonEnvs[k] {
			t.Errorf("configmap.yaml: %s is not a setting of lockstream", k)
		}
	}

	deployed := map[string]bool{}
	for _, d := range objs.deployments {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("deployment %s: its selector does not select its own pods (%v)", d.Name, err)
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			cmd := checkContainer(t, "deployment "+d.Name, c, settings, config, objs, true)
			deployed[cmd] = true
			checkGracePeriod(t, "deployment "+d.Name, d.Spec.Template.Spec.TerminationGracePeriodSeconds, c, config)
		}
	}
	for _, j := range objs.jobs {
		for _, c := range j.Spec.Template.Spec.Containers {
			deployed[checkContainer(t, "job "+j.Name, c, settings, config, objs, false)] = true
		}
	}
	for _, c := range commands() {
		if !slices.Contains(packTools, c.name) && !deployed[c.name] {
			t.Errorf("the daemon %q has no Deployment in deploy/k8s", c.name)
		}
	}
	for _, want := range []string{"api", "consume", "history", "heartbeat", "fanout", "retrier", "bridge", "maintain", "escalation", "migrate"} {
		if !deployed[want] {
			t.Errorf("deploy/k8s runs no %q", want)
		}
		if _, ok := settings[want]; !ok {
			t.Errorf("deploy/k8s runs %q, which is not a subcommand of lockstream", want)
		}
	}
	checkSelectors(t, objs)
}

// checkContainer checks one container and returns the subcommand it runs.
func checkContainer(t *testing.T, where string, c corev1.Container, settings map[string][]string,
	config map[string]string, objs k8sObjects, probed bool) string {
	t.Helper()
	where += " container " + c.Name
	if len(c.Command) > 0 || len(c.Args) == 0 {
		t.Errorf("%s: want the image's entrypoint with the subcommand as args, got command %v args %v", where, c.Command, c.Args)
		return ""
	}
	cmd := c.Args[0]
	known, ok := settings[cmd]
	if !ok {
		t.Errorf("%s: %q is not a subcommand of lockstream", where, cmd)
	}
	env := map[string]string{}
	for k, v := range config {
		env[k] = v
	}
	for _, e := range c.Env {
		if ok && !slices.Contains(known, e.Name) {
			t.Errorf("%s: %s is not a setting of lockstream %s", where, e.Name, cmd)
		}
		env[e.Name] = e.Value
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			if ref.SecretKeyRef.Name != "lockstream-secrets" || !strings.Contains(objs.secretDoc, "--from-literal="+ref.SecretKeyRef.Key+"=") {
				t.Errorf("%s: %s comes from secret %s key %s, which configmap.yaml does not tell how to create",
					where, e.Name, ref.SecretKeyRef.Name, ref.SecretKeyRef.Key)
			}
		}
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil || !slices.ContainsFunc(objs.configMaps, func(cm corev1.ConfigMap) bool { return cm.Name == from.ConfigMapRef.Name }) {
			t.Errorf("%s: envFrom %+v names no ConfigMap of the pack", where, from)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("%s: want cpu and memory requests and a memory limit, got %+v", where, c.Resources)
	}
	if !probed {
		return cmd
	}
	// The port the probes use must be the one the settings make the process serve.
	// (TestEveryDaemonCommandStartsAndStops probes each daemon command there.)
	addrSetting := "LOCKSTREAM_METRICS_ADDR"
	if cmd == "api" {
		addrSetting = "LOCKSTREAM_HTTP_ADDR"
	}
	if ok && !slices.Contains(known, addrSetting) {
		t.Errorf("%s: lockstream %s does not read %s, so nothing would answer its probes", where, cmd, addrSetting)
	}
	_, port, err := net.SplitHostPort(env[addrSetting])
	if err != nil || !strings.HasPrefix(env[addrSetting], "0.0.0.0:") {
		t.Errorf("%s: %s = %q, want 0.0.0.0:<port> so probes and scrapes reach it", where, addrSetting, env[addrSetting])
	}
	for _, probe := range []struct {
		name, path string
		p          *corev1.Probe
	}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
		if probe.p == nil || probe.p.HTTPGet == nil || probe.p.HTTPGet.Path != probe.path {
			t.Errorf("%s: want a %s probe on GET %s", where, probe.name, probe.path)
			continue
		}
		if got := containerPort(c, probe.p.HTTPGet.Port); strconv.Itoa(int(got)) != port {
			t.Errorf("%s: the %s probe goes to port %d, the process listens on %s", where, probe.name, got, port)
		}
	}
	return cmd
}

// checkGracePeriod fails t unless Kubernetes waits longer than the container's
// shutdown delay and timeout before it kills it: a process killed mid-drain
// leaves its in-flight work to be redone.
func checkGracePeriod(t *testing.T, where string, grace *int64, c corev1.Container, config map[string]string) {
	t.Helper()
	budget := time.Duration(0)
	for name, def := range map[string]time.Duration{"shutdown-delay": DefaultShutdownDelay, "shutdown-timeout": DefaultShutdownTimeout} {
		env := settings.Decl{Name: name}.Env()
		value := def.String()
		if v, ok := config[env]; ok {
			value = v
		}
		for _, e := range c.Env {
			if e.Name == env {
				value = e.Value
			}
		}
		d, err := time.ParseDuration(value)
		if err != nil {
			t.Errorf("%s: %s = %q: %v", where, env, value, err)
		}
		budget += d
	}
	const k8sDefaultGrace = 30 // seconds, when the manifest sets none
	seconds := int64(k8sDefaultGrace)
	if grace != nil {
		seconds = *grace
	}
	if time.Duration(seconds)*time.Second <= budget {
		t.Errorf("%s: terminationGracePeriodSeconds %d, want more than the shutdown delay + timeout (%v)", where, seconds, budget)
	}
}

// containerPort resolves a named or numbered port of c.
func containerPort(c corev1.Container, p intstr.IntOrString) int32 {
	if p.Type == intstr.Int {
		return p.IntVal
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort
		}
	}
	return -1
}

// checkSelectors makes every Service and PodDisruptionBudget select the pods of a
// Deployment, and every Service target a port those pods declare.
func checkSelectors(t *testing.T, objs k8sObjects) {
	t.Helper()
	selects := func(sel labels.Selector) *appsv1.Deployment {
		for i, d := range objs.deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				return &objs.deployments[i]
			}
		}
		return nil
	}
	for _, s := range objs.services {
		d := selects(labels.SelectorFromSet(s.Spec.Selector))
		if d == nil || len(s.Spec.Selector) == 0 {
			t.Errorf("service %s selects no Deployment's pods", s.Name)
			continue
		}
		for _, p := range s.Spec.Ports {
			if containerPort(d.Spec.Template.Spec.Containers[0], p.TargetPort) <= 0 {
				t.Errorf("service %s: target port %s is not a port of %s", s.Name, p.TargetPort.String(), d.Name)
			}
		}
	}
	if len(objs.pdbs) == 0 {
		t.Error("deploy/k8s has no PodDisruptionBudget")
	}
	for _, p := range objs.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || selects(sel) == nil {
			t.Errorf("pdb %s selects no Deployment's pods (%v)", p.Name, err)
		}
	}
}

// composeVariable is ${NAME...} in a compose value.
var composeVariable = regexp.MustCompile(`\$\{([A-Z_]+)`)

// TestOpsPackComposeSettings checks that deploy/docker-compose.yml runs real
// subcommands of the lockstream image with real settings of them.
func TestOpsPackComposeSettings(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(packPath("docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build       any               `yaml:"build"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	settings := commandSettings()
	ours := 0
	for name, svc := range compose.Services {
		if svc.Build == nil {
			continue // Kafka and the stores: their images' own settings
		}
		ours++
		if len(svc.Command) == 0 {
			t.Errorf("service %s: no command (a lockstream subcommand)", name)
			continue
		}
		known, ok := settings[svc.Command[0]]
		if !ok {
			t.Errorf("service %s: %q is not a subcommand of lockstream", name, svc.Command[0])
		}
		for k, v := range svc.Environment {
			if !slices.Contains(known, k) {
				t.Errorf("service %s: %s is not a setting of lockstream %s", name, k, svc.Command[0])
			}
			for _, m := range composeVariable.FindAllStringSubmatch(v, -1) {
				if m[1] != k {
					t.Errorf("service %s: %s takes ${%s}; pass each setting under its own name", name, k, m[1])
				}
			}
		}
	}
	if ours == 0 {
		t.Fatal("docker-compose.yml builds no lockstream service")
	}
}
