// Command peertrail is the audit and observability pipeline for a Kubernetes control plane in
// a mixed-version window: it receives every kube-apiserver's audit webhook, joins the entry and
// peer records of each request forwarded by the Mixed Version Proxy, and stores and exports
// what it finds.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs the command line args and returns the exit status; an error is one line on errOut.
func run(ctx context.Context, args []string, in io.Reader, out, errOut io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if strings.HasPrefix(err.Error(), "required flag") {
		// cobra's own check of MarkFlagRequired: a usage error, with the usage line.
		err = usageError(cmd, "%s", err.Error())
	}
	code := exitCode(err)
	var ee exitError
	var ce *cliError
	switch {
	case errors.As(err, &ee):
		// the command said what there was to say
	case errors.As(err, &ce):
		fmt.Fprintln(errOut, "peertrail:", oneLine(err.Error()))
	case code == exitInterrupted:
		fmt.Fprintln(errOut, "peertrail: interrupted")
	case strings.HasPrefix(err.Error(), "unknown command"):
		fmt.Fprintln(errOut, "peertrail:", oneLine(err.Error()), "(see peertrail --help for the commands)")
	default:
		fmt.Fprintln(errOut, "peertrail:", oneLine(err.Error()))
	}
	return code
}

type globalFlags struct {
	logLevel  string
	logFormat string
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(g.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", g.logFormat)
}

func newRootCommand() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "peertrail",
		Short: "Audit and observability pipeline for Kubernetes Mixed Version Proxy upgrades",
		Long: `peertrail receives the audit webhook of every kube-apiserver in a control plane that is
being rolled from one minor version to the next. It joins the entry server's and the peer's
records of each request the Mixed Version Proxy forwarded, classifies what happened (local,
proxied, proxy failed, misleading 404, broken, loop), and stores and exports the result.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError(cmd, "%v", err)
	})
	root.AddCommand(newVersionCommand(), newServeCommand(g), newAgentCommand(g), newDemoCommand(g), newChainCommand(g), newAPIServersCommand(g), newGateCommand(g), newSimulateCommand(g), newLoadgenCommand(g), newBenchCommand(g), newSQLCommand(g), newReportCommand(g), newSchemaCommand(g), newGenerateCommand(g), newDeployCommand(g))
	return root
}
