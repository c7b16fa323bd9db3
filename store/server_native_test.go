package store_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/peertrail/peertrail/store"
)

// TestServerStoreNativeProtocol drives the server store over clickhouse-go's native protocol
// (its default) against Debian's clickhouse-server (apt-get install clickhouse-server; test/run
// and CI install it). That server is 18.16, from 2018: it predates peertrail's schema
// (DateTime64, Map, TTL, codecs, skip indexes, query parameters), so this covers the wire path
// only: handshake and ping, DDL through Exec, a batch insert with an explicit column list
// through Insert, and every value read back through Query in ClickHouse's text form. The
// schema, the writer and the queries run against the 26.7 engine in the other tests, over HTTP
// for the server store.
func TestServerStoreNativeProtocol(t *testing.T) {
	bin, err := exec.LookPath("clickhouse-server")
	if err != nil {
		t.Fatal("clickhouse-server is not installed (Debian: apt-get install clickhouse-server; test/run installs it when run as root)")
	}
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	config := fmt.Sprintf(`<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>%d</tcp_port>
  <path>%s/</path>
  <tmp_path>%s/tmp/</tmp_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
  <timezone>UTC</timezone>
</yandex>`, port, dir, dir)
	users := `<yandex>
  <profiles><default/></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default/></quotas>
</yandex>`
	for name, text := range map[string]string{"config.xml": config, "users.xml": users} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config-file="+filepath.Join(dir, "config.xml"))
	cmd.Dir = dir
	out, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Logf("server log:\n%s", b)
		}
	}()

	var s *store.Server
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err = store.OpenServer(context.Background(), store.ServerOptions{DSN: "clickhouse://127.0.0.1:" + strconv.Itoa(port)})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server did not answer within 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	defer s.Close()

	bg := context.Background()
	if err := s.Exec(bg, "CREATE TABLE default.wire (n UInt64, s String, i Int32, f Float64, b UInt8, d DateTime, day Date, a Array(String), ai Array(Int32)) ENGINE = MergeTree ORDER BY n"); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 29, 16, 53, 22, 0, time.UTC)
	cols := []store.Column{{Name: "n", Type: "UInt64"}, {Name: "s", Type: "String"}, {Name: "i", Type: "Int32"}, {Name: "f", Type: "Float64"},
		{Name: "b", Type: "UInt8"}, {Name: "d", Type: "DateTime"}, {Name: "day", Type: "Date"}, {Name: "a", Type: "Array(String)"}, {Name: "ai", Type: "Array(Int32)"}}
	var rows [][]any
	for n := range 1000 {
		rows = append(rows, []any{uint64(n), fmt.Sprintf("it's \\ row\t%d", n), int32(-n), float64(n) / 4, uint8(n % 2), at.Add(time.Duration(n) * time.Second), at,
			[]string{"kas-a", "o'k"}, []int32{int32(n), -1}})
	}
	if err := s.Insert(bg, "default.wire", cols, rows); err != nil {
		t.Fatal(err)
	}
	res, err := s.Query(bg, "SELECT n, s, i, f, b, d, day, a, ai FROM default.wire WHERE n IN (0, 7, 999) ORDER BY n", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"0", "it's \\ row\t0", "0", "0", "0", "2026-11-29 16:53:22", "2026-11-29", `['kas-a','o\'k']`, "[0,-1]"},
		{"7", "it's \\ row\t7", "-7", "1.75", "1", "2026-11-29 16:53:29", "2026-11-29", `['kas-a','o\'k']`, "[7,-1]"},
		{"999", "it's \\ row\t999", "-999", "249.75", "1", "2026-11-29 17:10:01", "2026-11-29", `['kas-a','o\'k']`, "[999,-1]"},
	}
	if !reflect.DeepEqual(res.Rows, want) {
		t.Fatalf("read back over the native protocol:\n got %q\nwant %q", res.Rows, want)
	}
	if got := res.Columns[7]; got.Name != "a" || got.Type != "Array(String)" {
		t.Errorf("column a: %+v", got)
	}
	var se *store.Error
	if _, err := s.Query(bg, "SELECT * FROM default.nope", nil); !errorsAs(err, &se) || se.Code != 60 {
		t.Errorf("unknown table over the native protocol: %v", err)
	}
}
