package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/peertrail/peertrail/internal/termsafe"
)

// addOutputFlag gives a command that prints data kubectl's -o/--output: table (the default),
// json or yaml.
func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table, json or yaml")
}

// checkOutput refuses an output format other than table, json and yaml ("text" is table).
func checkOutput(cmd *cobra.Command, format string) error {
	switch format {
	case "table", "text", "", "json", "yaml":
		return nil
	}
	return usageError(cmd, "-o %q: want table, json or yaml", format)
}

// printer writes aligned "name: value" rows, escaped for a terminal (the tab and newline
// are the table's own).
type printer struct{ tw *tabwriter.Writer }

func (p *printer) row(name string, value any) {
	fmt.Fprintf(p.tw, "%s:\t%s\n", termsafe.String(name), termsafe.String(fmt.Sprint(value)))
}

// printData prints v as JSON or YAML, or as the rows table writes.
func printData(cmd *cobra.Command, format string, v any, table func(p *printer)) error {
	if err := checkOutput(cmd, format); err != nil {
		return err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if format == "json" || format == "yaml" {
		return printJSON(cmd.OutOrStdout(), format, b)
	}
	p := &printer{tw: tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)}
	table(p)
	return p.tw.Flush()
}

// printJSON prints a JSON document as indented JSON or as YAML.
func printJSON(w io.Writer, format string, doc []byte) error {
	if format == "yaml" {
		y, err := yaml.JSONToYAML(doc)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
