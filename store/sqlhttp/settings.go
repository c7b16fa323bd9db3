package sqlhttp

import (
	"regexp"
	"runtime"
	"sort"
	"strconv"
)

// clientSettings are the settings a client may set on a read of its own, by exact name, each
// with the values it may take. They change how the result is written or lower what the read
// may use; none lifts a limit, changes readonly, or names a file, a schema, a URL or a format
// template. Any other setting is refused (the engine has some 1,700; a prefix would admit
// the ones that read and write files, e.g. format_template_resultset and output_format_schema).
// max_execution_time is taken by the handler itself (a lower one is honoured by killing the
// read), and max_threads is at most the machine's cores.
var clientSettings = map[string]func(string) bool{
	"max_threads":                        func(v string) bool { return intIn(v, 1, int64(runtime.NumCPU())) },
	"join_use_nulls":                     isBool,
	"aggregate_functions_null_for_empty": isBool,
	"date_time_output_format":            oneOf("simple", "iso", "unix_timestamp"),
	"session_timezone":                   timeZone.MatchString,
	"use_client_time_zone":               isBool,

	"output_format_json_quote_64bit_integers":    isBool,
	"output_format_json_quote_64bit_floats":      isBool,
	"output_format_json_quote_denormals":         isBool,
	"output_format_json_quote_decimals":          isBool,
	"output_format_json_named_tuples_as_objects": isBool,
	"output_format_json_escape_forward_slashes":  isBool,
	"output_format_json_validate_utf8":           isBool,
	"output_format_decimal_trailing_zeros":       isBool,
	"output_format_csv_crlf_end_of_line":         isBool,
	"output_format_tsv_crlf_end_of_line":         isBool,
	"format_csv_delimiter":                       csvDelimiter.MatchString,
	"format_csv_null_representation":             nullText.MatchString,
	"format_tsv_null_representation":             nullText.MatchString,
	"output_format_pretty_max_rows":              func(v string) bool { return intIn(v, 1, 10000) },
	"output_format_pretty_max_column_pad_width":  func(v string) bool { return intIn(v, 1, 250) },
	"output_format_pretty_max_value_width":       func(v string) bool { return intIn(v, 1, 10000) },
	"output_format_pretty_color":                 oneOf("0", "1", "auto"),
	"output_format_pretty_grid_charset":          oneOf("ASCII", "UTF-8"),
	"output_format_pretty_row_numbers":           isBool,
}

var (
	// A time zone name as the tz database writes them (Europe/Paris, Etc/GMT+3, UTC); the
	// engine refuses one it does not know.
	timeZone = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+){0,2}$`)
	// One printable ASCII character that cannot break a CSV row apart.
	csvDelimiter = regexp.MustCompile(`^[!#-&(-~]$`)
	nullText     = regexp.MustCompile(`^[!-~]{0,16}$`)
)

func isBool(v string) bool { return v == "0" || v == "1" || v == "true" || v == "false" }

func intIn(v string, lo, hi int64) bool {
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n >= lo && n <= hi
}

func oneOf(values ...string) func(string) bool {
	return func(v string) bool {
		for _, a := range values {
			if v == a {
				return true
			}
		}
		return false
	}
}

// ClientSetting says whether a client may set a setting to value on a read of its own (see
// clientSettings).
func ClientSetting(name, value string) bool {
	ok := clientSettings[name]
	return ok != nil && ok(value)
}

// ClientSettings returns the names of the settings a client may set, sorted.
func ClientSettings() []string {
	out := make([]string, 0, len(clientSettings)+1)
	for k := range clientSettings {
		out = append(out, k)
	}
	out = append(out, "max_execution_time")
	sort.Strings(out)
	return out
}
