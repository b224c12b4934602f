package settings

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// String declares a text setting bound to p, with default def.
func (s *Set) String(p *string, def string, d Decl) {
	*p = def
	s.bind(d, (*stringValue)(p))
}

// Int declares a whole-number setting bound to p.
func (s *Set) Int(p *int, def int, d Decl) {
	*p = def
	s.bind(d, (*intValue)(p))
}

// Float declares a number setting bound to p.
func (s *Set) Float(p *float64, def float64, d Decl) {
	*p = def
	s.bind(d, (*floatValue)(p))
}

// Bool declares a true/false setting bound to p (true, 1, yes; false, 0, no or
// empty).
func (s *Set) Bool(p *bool, def bool, d Decl) {
	*p = def
	s.bind(d, (*boolValue)(p))
}

// Duration declares a Go duration setting bound to p ("0" is zero).
func (s *Set) Duration(p *time.Duration, def time.Duration, d Decl) {
	*p = def
	s.bind(d, (*durationValue)(p))
}

// List declares a comma-separated setting bound to p, blanks dropped.
func (s *Set) List(p *[]string, def []string, d Decl) {
	*p = def
	s.bind(d, (*listValue)(p))
}

// Func declares a setting of a type of its box's own: parse turns text into *p,
// format turns *p back into text (for the default and `lockstream config`).
func Func[T any](s *Set, p *T, def T, parse func(string) (T, error), format func(T) string, d Decl) {
	*p = def
	s.bind(d, &funcValue[T]{p: p, parse: parse, format: format})
}

type stringValue string

func (v *stringValue) set(text string) error { *v = stringValue(strings.TrimSpace(text)); return nil }
func (v *stringValue) String() string        { return string(*v) }

type intValue int

func (v *intValue) set(text string) error {
	n, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil {
		return fmt.Errorf("not a whole number: %q", text)
	}
	*v = intValue(n)
	return nil
}
func (v *intValue) String() string { return strconv.Itoa(int(*v)) }

type floatValue float64

func (v *floatValue) set(text string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(text), 64)
	if err != nil {
		return fmt.Errorf("not a number: %q", text)
	}
	*v = floatValue(f)
	return nil
}
func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }

type boolValue bool

func (v *boolValue) set(text string) error {
	switch strings.ToLower(strings.TrimSpace(text)) {
	case "true", "1", "yes":
		*v = true
	case "false", "0", "no", "":
		*v = false
	default:
		return fmt.Errorf("want true or false, got %q", text)
	}
	return nil
}
func (v *boolValue) String() string { return strconv.FormatBool(bool(*v)) }

type durationValue time.Duration

func (v *durationValue) set(text string) error {
	d, err := time.ParseDuration(strings.TrimSpace(text))
	if err != nil {
		return err
	}
	*v = durationValue(d)
	return nil
}
func (v *durationValue) String() string { return FormatDuration(time.Duration(*v)) }

// FormatDuration writes d as people write it: 2m, 1h, 120h, 1m30s, 0.
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	text := d.String()
	if strings.HasSuffix(text, "m0s") {
		text = strings.TrimSuffix(text, "0s")
	}
	if strings.HasSuffix(text, "h0m") {
		text = strings.TrimSuffix(text, "0m")
	}
	return text
}

type listValue []string

func (v *listValue) set(text string) error {
	var out []string
	for _, part := range strings.Split(text, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	*v = out
	return nil
}
func (v *listValue) String() string { return strings.Join(*v, ",") }

type funcValue[T any] struct {
	p      *T
	parse  func(string) (T, error)
	format func(T) string
}

func (v *funcValue[T]) set(text string) error {
	x, err := v.parse(strings.TrimSpace(text))
	if err != nil {
		return err
	}
	*v.p = x
	return nil
}
func (v *funcValue[T]) String() string { return v.format(*v.p) }
