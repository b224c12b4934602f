// Package settings is the plumbing of lockstream's configuration: each box declares
// its settings once — flag, environment variable, default and doc — bound to the
// fields of its own Config (as Loki's RegisterFlags), and a command registers the
// boxes it runs. Nothing is looked up by name at run time: a daemon reads the field
// its box bound, so a setting a command did not register cannot be read by it.
//
// A value comes from the flag when it is given, else from the variable when it is
// set, else from the declared default; Set remembers which, for `lockstream config`.
package settings

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// EnvPrefix starts every setting's environment variable.
const EnvPrefix = "LOCKSTREAM_"

// Source says where a setting's value came from.
type Source string

// The sources of a value, weakest first.
const (
	FromDefault Source = "default"
	FromEnv     Source = "env"
	FromFlag    Source = "flag"
)

// Decl declares one setting.
type Decl struct {
	// Name is the flag's name (`--http-addr`); the variable is EnvPrefix and the
	// name in upper case with underscores (LOCKSTREAM_HTTP_ADDR).
	Name string
	// Doc says what the setting does, for --help, `lockstream config` and the
	// docs' tables.
	Doc string
	// Secret values (tokens, keys) are shown as <set>, never as they are.
	Secret bool
}

// Env is the setting's environment variable.
func (d Decl) Env() string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(d.Name, "-", "_"))
}

// Registrar is a box's configuration: it declares its settings on a Set, bound to
// its own fields.
type Registrar interface {
	RegisterSettings(s *Set)
}

// Set is the settings one command registered, in order of declaration.
type Set struct {
	list   []*setting
	byName map[string]*setting
	errs   []error
}

// setting is one declared setting and every field bound to it: a setting two boxes
// of one command read (the API's and the heartbeat's view of the heartbeat timeout)
// is declared by the same code twice and set in both.
type setting struct {
	Decl
	def     string
	targets []value
	source  Source
	raw     string
}

// value is a typed field a setting is bound to.
type value interface {
	// set parses text into the field.
	set(text string) error
	// String formats the field's current value as its flag would take it.
	String() string
}

// New returns an empty Set.
func New() *Set {
	return &Set{byName: map[string]*setting{}}
}

// Register has every box declare its settings on s.
func (s *Set) Register(boxes ...Registrar) {
	for _, b := range boxes {
		b.RegisterSettings(s)
	}
}

// bind declares d bound to v, whose current value is the default. Declaring a name
// again binds one more field, when the declaration and the default are the same; a
// different one is an error of the command, reported by Apply.
func (s *Set) bind(d Decl, v value) {
	def := v.String()
	if old, ok := s.byName[d.Name]; ok {
		if old.Decl != d || old.def != def {
			s.errs = append(s.errs, fmt.Errorf("settings: %s is declared twice, differently (default %q and %q)", d.Env(), old.def, def))
			return
		}
		old.targets = append(old.targets, v)
		return
	}
	st := &setting{Decl: d, def: def, targets: []value{v}, source: FromDefault, raw: def}
	s.byName[d.Name] = st
	s.list = append(s.list, st)
}

// Apply sets every setting whose variable lookupEnv finds, and registers every
// setting as a flag of fs, whose parsing then beats the variable. The error names
// each variable that does not parse, and any setting declared twice differently.
func (s *Set) Apply(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	errs := append([]error(nil), s.errs...)
	for _, st := range s.list {
		if text, ok := lookupEnv(st.Env()); ok {
			if err := st.set(text); err != nil {
				errs = append(errs, fmt.Errorf("%s / --%s: %w", st.Env(), st.Name, err))
			} else {
				st.source = FromEnv
			}
		}
		if fs != nil {
			fs.Var(flagValue{st}, st.Name, st.Doc)
		}
	}
	return errors.Join(errs...)
}

// set parses text into every field bound to the setting.
func (st *setting) set(text string) error {
	for _, t := range st.targets {
		if err := t.set(text); err != nil {
			return err
		}
	}
	st.raw = st.targets[0].String()
	return nil
}

// flagValue is a setting as its flag: setting it through the flag marks its
// source.
type flagValue struct{ st *setting }

func (f flagValue) String() string {
	if f.st == nil {
		return ""
	}
	return f.st.def
}

func (f flagValue) Set(text string) error {
	if err := f.st.set(text); err != nil {
		return err
	}
	f.st.source = FromFlag
	return nil
}
