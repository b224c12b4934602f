package settings

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
)

// Row is one setting as `lockstream config` shows it.
type Row struct {
	Variable string `json:"variable"`
	Flag     string `json:"flag"`
	Value    string `json:"value"`
	Default  string `json:"default"`
	Source   Source `json:"source"`
	Secret   bool   `json:"secret,omitempty"`
	Doc      string `json:"doc"`
}

// secretShown stands for a secret's value that is set.
const secretShown = "<set>"

// Rows returns every registered setting in order of declaration, secrets shown as
// <set> and URL passwords masked.
func (s *Set) Rows() []Row {
	rows := make([]Row, 0, len(s.list))
	for _, st := range s.list {
		r := Row{Variable: st.Env(), Flag: "--" + st.Name, Value: st.raw, Default: st.def, Source: st.source,
			Secret: st.Secret, Doc: st.Doc}
		switch {
		case st.Secret && r.Value != "":
			r.Value = secretShown
		case st.Secret:
		default:
			r.Value = redactURL(r.Value)
		}
		rows = append(rows, r)
	}
	return rows
}

// Lookup returns the row of the setting of that flag name.
func (s *Set) Lookup(name string) (Row, bool) {
	for _, r := range s.Rows() {
		if r.Flag == "--"+name {
			return r, true
		}
	}
	return Row{}, false
}

// redactURL masks the password of a URL with one (amqp://guest:xxxxx@host/);
// anything else is returned as it is.
func redactURL(text string) string {
	if !strings.Contains(text, "://") {
		return text
	}
	u, err := url.Parse(text)
	if err != nil || u.User == nil {
		return text
	}
	if _, has := u.User.Password(); !has {
		return text
	}
	return u.Redacted()
}

// WriteText writes the rows as an aligned table for people.
func WriteText(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tFLAG\tVALUE\tDEFAULT\tSOURCE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Variable, r.Flag, orDash(r.Value), orDash(r.Default), r.Source)
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteJSON writes the rows as one JSON array, for machines.
func WriteJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}

// WriteMarkdown writes the docs' table of the rows: variable, flag, default and
// what the setting does. Values are left out: the docs show the defaults.
func WriteMarkdown(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| variable | flag | default | what it does |\n|---|---|---|---|\n")
	for _, r := range rows {
		def := "(empty)"
		if r.Default != "" {
			def = "`" + r.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", r.Variable, r.Flag, def, markdownCell(r.Doc))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// markdownCell escapes what would end a table cell.
func markdownCell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// ParseMarkdown reads back a table WriteMarkdown wrote: by variable, its flag,
// default and doc as rows (value and source empty). Lines that are not rows of
// such a table are skipped.
func ParseMarkdown(text string) []Row {
	var rows []Row
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := splitCells(strings.Trim(line, "|"))
		if len(cells) != 4 {
			continue
		}
		def := strings.TrimSpace(cells[2])
		if def == "(empty)" {
			def = ""
		}
		rows = append(rows, Row{
			Variable: strings.Trim(strings.TrimSpace(cells[0]), "`"),
			Flag:     strings.Trim(strings.TrimSpace(cells[1]), "`"),
			Default:  strings.Trim(def, "`"),
			Doc:      strings.ReplaceAll(strings.TrimSpace(cells[3]), `\|`, "|"),
		})
	}
	return rows
}

// splitCells splits a table row on the bars that are not escaped.
func splitCells(line string) []string {
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cur.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(line[i])
		}
	}
	return append(cells, cur.String())
}
