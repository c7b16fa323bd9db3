package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/peertrail/peertrail/internal/termsafe"
)

// The exit statuses of every command (documented in the root command's help and README.md).
const (
	exitOK          = 0
	exitFailure     = 1 // the command ran and failed: a query error, a server that answered with an error
	exitUsage       = 2 // a missing or bad argument or flag, an unknown command
	exitPause       = 3 // `peertrail gate`: the verdict is pause
	exitNotFound    = 4 // what was asked for does not exist (`peertrail chain` of an unknown auditID)
	exitUnreachable = 5 // the server could not be reached, or what answers there is not what the command needs (a wrong port)
	exitRefused     = 6 // the server refused the credentials (reader token, SQL password)
	exitInterrupted = 130
)

const exitCodesHelp = `Exit status:
  0  success
  1  the command failed (a query error; the server answered with an error)
  2  usage: a missing or bad argument or flag
  3  gate: pause
  4  not found (chain: no such auditID)
  5  unreachable: nothing answers at the address, or the wrong service does (a wrong port)
  6  refused: the server refused the credentials (reader token, SQL password)
  130 interrupted (Ctrl-C)`

// cliError is an error with an exit status and a hint: main prints "peertrail: <msg> (<hint>)"
// on one line and exits with code.
type cliError struct {
	code int
	msg  string
	hint string
}

func (e *cliError) Error() string {
	if e.hint == "" {
		return e.msg
	}
	return e.msg + " (" + e.hint + ")"
}

func errorf(code int, hint, format string, args ...any) error {
	return &cliError{code: code, msg: fmt.Sprintf(format, args...), hint: hint}
}

// usageError is a missing or bad argument: the message and the command's usage line.
func usageError(cmd *cobra.Command, format string, args ...any) error {
	return &cliError{code: exitUsage, msg: fmt.Sprintf(format, args...),
		hint: "usage: " + cmd.UseLine() + "; see " + cmd.CommandPath() + " --help"}
}

// argsNamed is cobra.ExactArgs with the arguments' names and meaning in its errors.
func argsNamed(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usageError(cmd, "%s needs %s", cmd.CommandPath(), strings.Join(names[len(args):], " and "))
		}
		if len(args) > len(names) {
			return usageError(cmd, "%s takes %d argument(s), got %d: unexpected %q", cmd.CommandPath(), len(names), len(args), args[len(names)])
		}
		return nil
	}
}

// noArgs is cobra.NoArgs with a usage hint.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return usageError(cmd, "unknown command %q for %s", args[0], cmd.CommandPath())
		}
		return usageError(cmd, "%s takes no arguments, got %q", cmd.CommandPath(), args[0])
	}
	return nil
}

// group is the RunE of a command that only holds subcommands: alone it prints its help, with an
// argument it is a usage error (cobra would print the help and exit 0 for a mistyped
// subcommand).
func group(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return errorf(exitUsage, "see "+cmd.CommandPath()+" --help for its commands", "unknown command %q for %s", args[0], cmd.CommandPath())
	}
	return cmd.Help()
}

// exitCode and message turn any error a command returned into its exit status and one line.
func exitCode(err error) int {
	var ce *cliError
	var ee exitError
	switch {
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case strings.HasPrefix(err.Error(), "unknown command"), strings.HasPrefix(err.Error(), "unknown flag"),
		strings.HasPrefix(err.Error(), "unknown shorthand flag"):
		return exitUsage
	}
	return exitFailure
}

// oneLine keeps the first line of an error's text.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i]) + " …"
	}
	// An error can quote what a client chose (an engine error quotes the stored value).
	return termsafe.String(s)
}

// unreachable recognises an error of a request that reached no server (refused, no such host,
// a timeout, TLS spoken to a plain server or the reverse) and says it in one line with a hint;
// other errors come back nil.
func unreachable(err error, base, what, flag string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	var de *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return errorf(exitUnreachable, "is it running? "+flag+" sets the address", "nothing answers at %s: connection refused (want %s)", base, what)
	case errors.As(err, &de):
		return errorf(exitUnreachable, flag+" sets the address", "cannot resolve %s: %s", de.Name, de.Err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &oe) && oe.Timeout():
		return errorf(exitUnreachable, "is the address right and reachable? "+flag+" sets it", "no answer from %s in time (want %s)", base, what)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return errorf(exitUnreachable, "use http:// in "+flag, "%s speaks plain HTTP, not HTTPS", base)
	case strings.Contains(err.Error(), "first record does not look like a TLS handshake"):
		return errorf(exitUnreachable, "use http:// in "+flag, "%s speaks plain HTTP, not HTTPS", base)
	case strings.Contains(err.Error(), "malformed HTTP response"):
		return errorf(exitUnreachable, "use https:// in "+flag+" (serve's default is TLS)", "%s speaks TLS, not plain HTTP", base)
	case errors.As(err, &oe):
		return errorf(exitUnreachable, flag+" sets the address", "cannot reach %s: %v", base, oe.Err)
	}
	return nil
}

// addrInUse adds which flag changes a busy address to a listen error.
func addrInUse(err error) error {
	if err == nil || !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	return errorf(exitFailure, "another process listens there: give the flag named above another address, e.g. 127.0.0.1:0 for a free port", "%s", oneLine(err.Error()))
}
