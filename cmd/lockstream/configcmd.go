package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/lockstream/lockstream/internal/settings"
)

// configCommand is `lockstream config`, which run handles itself: it must know
// the command it shows before it can parse that command's flags.
func configCommand() command {
	return command{
		name: "config",
		summary: "print every setting of a command (default all) with its variable, flag, value, default and source " +
			"(default, env, flag), secrets as <set>; --json for machines, --markdown for the docs' table",
		args: " [command]",
	}
}

// runConfig is `lockstream config [command] [--json|--markdown] [the command's flags]`.
func runConfig(args []string, cmds []command, stdout, stderr io.Writer) int {
	target := findCommand(cmds, "all")
	for _, a := range args {
		if c := findCommand(cmds, a); c != nil && c.setup != nil {
			target = c
			break
		}
	}
	fs := flag.NewFlagSet("lockstream config "+target.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print JSON, for machines")
	asMarkdown := fs.Bool("markdown", false, "print the docs' table (variable, flag, default, doc)")
	s, _, _ := setupCommand(*target, fs)
	if err := s.Apply(fs, os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "lockstream config: %v\n", err)
		return 2
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: lockstream config [command] [--json|--markdown] [the command's flags]\n\n%s\n\nFlags:\n",
			configCommand().summary)
		printFlags(stderr, fs, s)
	}
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(positional) > 1 || (len(positional) == 1 && positional[0] != target.name) {
		fmt.Fprintf(stderr, "lockstream config: want at most one command name; got %q\n", strings.Join(positional, " "))
		return 2
	}
	rows := s.Rows()
	switch {
	case *asJSON:
		err = settings.WriteJSON(stdout, rows)
	case *asMarkdown:
		err = settings.WriteMarkdown(stdout, rows)
	default:
		err = settings.WriteText(stdout, rows)
	}
	if err != nil {
		fmt.Fprintf(stderr, "lockstream config: %v\n", err)
		return 1
	}
	return 0
}

// findCommand returns the command of that name, or nil.
func findCommand(cmds []command, name string) *command {
	for i := range cmds {
		if cmds[i].name == name {
			return &cmds[i]
		}
	}
	return nil
}
