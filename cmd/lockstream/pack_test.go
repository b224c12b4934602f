package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"

	"github.com/lockstream/lockstream/storage/storagetest"
	"github.com/lockstream/lockstream/stream/streamtest"
)

// packDaemons are the daemons whose metrics the operations pack may use: every
// daemon of `lockstream all` with bridges configured (exportedMetrics sets both
// broker URLs and event publishing, so the AMQP and MQTT bridges register all their
// metrics; building them connects to nothing). A daemon missing here makes the pack
// test fail on its metrics (never pass wrongly), so a new daemon is added here when
// a panel or a rule uses it.
func packDaemons(c *allSettings) []box {
	return []box{&c.API, &c.Consumer, historyBox{}, &c.Heartbeat, &c.Fanout, &c.Retrier, &c.Maintain, &c.Escalation, &c.Bridge}
}

// exportedMetric is one metric family a process may export.
type exportedMetric struct {
	// kind is the type seen in a Gather, or UNTYPED for a labelled family with no
	// series yet (its Desc says only its name and labels).
	kind   dto.MetricType
	typed  bool
	labels []string
}

// exportedMetrics builds every daemon of packDaemons on one node, as
// `lockstream all` does, against real stores and a kfake broker, and returns the
// metric families the node's registry describes, by name.
func exportedMetrics(t *testing.T) map[string]exportedMetric {
	t.Helper()
	stores := storagetest.New(t)
	kafka := streamtest.Config(t, 1)
	c := parseAllSettings(t,
		"--pg-url="+stores.PostgresURL, "--clickhouse-url="+stores.ClickHouseURL,
		"--redis-url="+stores.RedisURL, "--redis-prefix="+stores.RedisPrefix,
		"--kafka-brokers="+strings.Join(kafka.Brokers, ","), "--kafka-partitions=1",
		"--admin-token=pack-admin", "--ingest-token=pack-ingest", "--http-addr=127.0.0.1:0",
		// The bridges' settings: the daemons are built, never run, so nothing dials these.
		"--amqp-url=amqp://guest:guest@127.0.0.1:5672/", "--amqp-publish-events=true",
		"--mqtt-url=mqtt://127.0.0.1:1883",
	)
	ctx := context.Background()
	c.Node.need = usesAll | usesKafka
	n, err := openNode(ctx, &c.Node, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("opening the stores (make services starts them): %v", err)
	}
	t.Cleanup(n.close)
	for _, b := range packDaemons(c) {
		d, err := b.daemon(ctx, n)
		if err != nil {
			t.Fatalf("building a daemon: %v", err)
		}
		if d.close != nil {
			t.Cleanup(d.close)
		}
	}

	out := map[string]exportedMetric{}
	descs := make(chan *prometheus.Desc)
	go func() { n.reg.Describe(descs); close(descs) }()
	for d := range descs {
		name, labels := parseDesc(t, d)
		out[name] = exportedMetric{labels: labels}
	}
	families, err := n.reg.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	for _, mf := range families {
		m := out[mf.GetName()]
		m.kind, m.typed = mf.GetType(), true
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if !slices.Contains(m.labels, l.GetName()) {
					m.labels = append(m.labels, l.GetName())
				}
			}
		}
		out[mf.GetName()] = m
	}
	if _, ok := out["lockstream_readings_consumed_total"]; !ok || len(out) < 40 {
		t.Fatalf("the registry describes only %d families: %v", len(out), out)
	}
	return out
}

// descPattern reads a Desc's String(), the only way client_golang shows a Desc's
// name and variable labels.
var descPattern = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func parseDesc(t *testing.T, d *prometheus.Desc) (string, []string) {
	t.Helper()
	m := descPattern.FindStringSubmatch(d.String())
	if m == nil {
		t.Fatalf("cannot read the name of %s", d)
	}
	var labels []string
	for l := range strings.SplitSeq(m[2], ",") {
		if l = strings.TrimSpace(l); l != "" {
			labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
		}
	}
	return m[1], labels
}

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// checkSeriesName reports what is wrong with a selector's metric name and label
// matchers, or "" when the binary exports them: a histogram's _bucket, _sum and
// _count and a summary's _sum and _count count as the family's.
func checkSeriesName(exported map[string]exportedMetric, name string, matchers []string) string {
	family, ok := exported[name]
	extra := targetLabels
	if !ok {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base, cut := strings.CutSuffix(name, suffix)
			m, found := exported[base]
			if !cut || !found {
				continue
			}
			switch {
			case !m.typed, m.kind == dto.MetricType_HISTOGRAM, m.kind == dto.MetricType_SUMMARY && suffix != "_bucket":
				family, ok = m, true
				if suffix == "_bucket" {
					extra = append(slices.Clone(extra), "le")
				}
			default:
				return fmt.Sprintf("%s: %s is a %s, it has no %s series", name, base, m.kind, suffix)
			}
		}
	}
	if !ok {
		return fmt.Sprintf("%s is not a metric the binary exports", name)
	}
	for _, l := range matchers {
		if l != model.MetricNameLabel && !slices.Contains(family.labels, l) && !slices.Contains(extra, l) {
			return fmt.Sprintf("%s has no label %q (it has %v)", name, l, family.labels)
		}
	}
	return ""
}

// checkPromQL parses expr and checks every metric it selects.
func checkPromQL(t *testing.T, exported map[string]exportedMetric, where, expr string) {
	t.Helper()
	parsed, err := parser.ParseExpr(expr)
	if err != nil {
		t.Errorf("%s: %q does not parse: %v", where, expr, err)
		return
	}
	selectors := 0
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		selectors++
		name := vs.Name
		var labels []string
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel && name == "" {
				name = m.Value
			}
			labels = append(labels, m.Name)
		}
		if problem := checkSeriesName(exported, name, labels); problem != "" {
			t.Errorf("%s: %s", where, problem)
		}
		return nil
	})
	if selectors == 0 {
		t.Errorf("%s: %q selects no metric", where, expr)
	}
}

// packPath is a file of deploy/, from this package's directory.
func packPath(parts ...string) string {
	return filepath.Join(append([]string{"..", "..", "deploy"}, parts...)...)
}

// grafanaVariables are Grafana's built-in interval variables, with a value that
// makes the expression valid PromQL; any other $ fails the test.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m",
	"$__interval", "1m", "${__interval}", "1m", "$__range", "1h", "${__range}", "1h")

// dashboardPanel is the part of a Grafana panel the test reads.
type dashboardPanel struct {
	Title   string           `json:"title"`
	Type    string           `json:"type"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestOpsPackQueriesUseExportedMetrics parses every PromQL expression of the
// Grafana dashboard and of the alert rules, and fails on any metric or label the
// binary does not export: a renamed metric breaks this test, not a dashboard in
// production.
func TestOpsPackQueriesUseExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)

	raw, err := os.ReadFile(packPath("grafana", "lockstream.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string           `json:"title"`
		UID    string           `json:"uid"`
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("lockstream.json: %v", err)
	}
	exprs := 0
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			walk(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("dashboard panel %q has no query", p.Title)
			}
			for _, target := range p.Targets {
				expr := grafanaVariables.Replace(target.Expr)
				if strings.Contains(expr, "$") {
					t.Errorf("dashboard panel %q: unknown Grafana variable in %q", p.Title, target.Expr)
					continue
				}
				exprs++
				checkPromQL(t, exported, fmt.Sprintf("dashboard panel %q", p.Title), expr)
			}
		}
	}
	walk(dash.Panels)
	if dash.UID == "" || exprs < 30 {
		t.Fatalf("dashboard uid %q with %d expressions", dash.UID, exprs)
	}

	rules := alertRules(t)
	for _, rule := range rules {
		checkPromQL(t, exported, "alert "+rule.Alert, rule.Expr)
	}
	t.Logf("checked %d dashboard expressions and %d alert rules against %d exported families", exprs, len(rules), len(exported))
}

// alertRule is one rule of deploy/prometheus/alerts.yaml, in Prometheus' rule file
// format.
type alertRule struct {
	Alert         string            `yaml:"alert"`
	Record        string            `yaml:"record"`
	Expr          string            `yaml:"expr"`
	For           string            `yaml:"for"`
	KeepFiringFor string            `yaml:"keep_firing_for"`
	Labels        map[string]string `yaml:"labels"`
	Annotations   map[string]string `yaml:"annotations"`
}

// alertRules decodes the rule file strictly (an unknown field is an error, as in
// Prometheus) and checks what Prometheus checks on load besides the expressions:
// names, durations, severities and annotation templates.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	f, err := os.Open(packPath("prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var file struct {
		Groups []struct {
			Name     string      `yaml:"name"`
			Interval string      `yaml:"interval"`
			Rules    []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	// Prometheus' template functions that the annotations use, as stubs.
	stub := func(any) string { return "" }
	funcs := template.FuncMap{"humanize": stub, "humanizePercentage": stub, "humanizeDuration": stub,
		"humanize1024": stub, "humanizeTimestamp": stub, "title": stub, "toUpper": stub, "toLower": stub}
	var rules []alertRule
	names := map[string]bool{}
	groups := map[string]bool{}
	for _, g := range file.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("alerts.yaml: group name %q empty or repeated", g.Name)
		}
		groups[g.Name] = true
		for _, r := range g.Rules {
			if r.Alert == "" || r.Record != "" || names[r.Alert] {
				t.Errorf("alerts.yaml: rule %q: want one alert per rule with a unique name", r.Alert+r.Record)
			}
			names[r.Alert] = true
			for _, d := range []string{r.For, r.KeepFiringFor} {
				if _, err := model.ParseDuration(d); d != "" && err != nil {
					t.Errorf("alert %s: %v", r.Alert, err)
				}
			}
			if s := r.Labels["severity"]; s != "page" && s != "ticket" {
				t.Errorf("alert %s: severity %q, want page or ticket", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no summary", r.Alert)
			}
			for k, text := range r.Annotations {
				// Prometheus prefixes its variables, so $labels and $value resolve.
				if _, err := template.New(k).Funcs(funcs).Parse("{{$labels := 0}}{{$value := 0}}{{$_ := $labels}}{{$_ = $value}}" + text); err != nil {
					t.Errorf("alert %s: annotation %s: %v", r.Alert, k, err)
				}
			}
			rules = append(rules, r)
		}
	}
	if len(rules) < 10 {
		t.Fatalf("alerts.yaml has %d rules", len(rules))
	}
	return rules
}
