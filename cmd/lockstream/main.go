// Command lockstream is the one binary of lockstream: every daemon is a subcommand, and
// `lockstream all` runs them all in one process (the single-node and demo mode).
//
// main parses, validates and dispatches; the wiring of each daemon lives in
// commands.go, and the daemons themselves in their packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/lockstream/lockstream/internal/settings"
)

func main() {
	// The first SIGINT or SIGTERM cancels the context: the process stops being
	// ready, then its daemons drain and stop in order (see runInOrder). A second
	// one exits at once, for an operator who will not wait.
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		cancel()
		sig := <-signals
		fmt.Fprintf(os.Stderr, "lockstream: second signal (%v): exiting at once, without draining\n", sig)
		os.Exit(exitSecondSignal)
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(signals)
	cancel()
	os.Exit(code)
}

// exitSecondSignal is the exit status after a second SIGINT or SIGTERM: the
// process did not drain.
const exitSecondSignal = 1

// run is main without the signals and the exit, for tests: it runs until ctx ends and
// returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var cmd *command
	for i := range cmds {
		if cmds[i].name == args[0] {
			cmd = &cmds[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "lockstream: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}

	if cmd.name == "config" {
		return runConfig(args[1:], cmds, stdout, stderr)
	}
	if len(cmd.subcommands) > 0 {
		sub, code := pickSubcommand(*cmd, args[1:], stderr)
		if sub == nil {
			return code
		}
		cmd, args = sub, args[1:]
	}

	fs := flag.NewFlagSet("lockstream "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	s, proc, runCmd := setupCommand(*cmd, fs)
	if err := s.Apply(fs, os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "lockstream %s: %v\n", cmd.name, err)
		return 2
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: lockstream %s%s [flags]\n\n%s\n\nFlags (flags may come before or after arguments; a setting's flag beats its environment variable):\n",
			cmd.name, cmd.args, cmd.summary)
		printFlags(stderr, fs, s)
	}
	positional, err := parseInterspersed(fs, args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if cmd.args == "" && len(positional) > 0 {
		fmt.Fprintf(stderr, "lockstream %s: unexpected argument %q (see lockstream %s --help)\n", cmd.name, positional[0], cmd.name)
		return 2
	}
	logger, err := newLogger(stderr, proc.LogLevel)
	if err != nil {
		fmt.Fprintf(stderr, "lockstream %s: %v\n", cmd.name, err)
		return 2
	}

	if err := runCmd(ctx, positional, stdout, logger); err != nil {
		logger.Error("stopped with an error", "command", cmd.name, "err", err)
		return 1
	}
	return 0
}

// setupCommand declares a command's settings — the process's and its boxes' — on
// a new Set and its own flags on fs.
func setupCommand(cmd command, fs *flag.FlagSet) (*settings.Set, *processSettings, runner) {
	s := settings.New()
	proc := &processSettings{}
	s.Register(proc)
	return s, proc, cmd.setup(s, fs)
}

// parseInterspersed parses flags wherever they stand among the arguments, as
// people expect (`lockstream bench ingest --sensors 1000`), where the flag package
// stops at the first argument; "--" ends the flags. It returns the arguments.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(positional, rest...), nil
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// pickSubcommand returns the subcommand of group that args name first, named
// "group sub", or nil and the exit code after printing the group's usage (0 when
// help was asked for).
func pickSubcommand(group command, args []string, stderr io.Writer) (*command, int) {
	if len(args) > 0 {
		for _, sub := range group.subcommands {
			if sub.name == args[0] {
				sub.name = group.name + " " + sub.name
				return &sub, 0
			}
		}
	}
	code := 2
	switch {
	case len(args) == 0:
		fmt.Fprintf(stderr, "lockstream %s: name one:\n", group.name)
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		code = 0
	default:
		fmt.Fprintf(stderr, "lockstream %s: unknown %s %q; name one:\n", group.name, strings.TrimSpace(strings.Trim(group.args, " <>")), args[0])
	}
	fmt.Fprintf(stderr, "usage: lockstream %s%s [flags]    (lockstream %s <name> --help lists its flags)\n\n%s\n\n",
		group.name, group.args, group.name, group.summary)
	for _, sub := range group.subcommands {
		fmt.Fprintf(stderr, "  %-13s %s\n", sub.name, sub.summary)
	}
	return nil, code
}

func usage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "lockstream watches door-lock sensors and tells their owners what changed.")
	fmt.Fprintln(w, "\nusage: lockstream <command> [flags]    (lockstream <command> --help lists its flags)")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("LOCKSTREAM_LOG_LEVEL / --log-level: %w", err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
