package main

import (
	_ "github.com/fxamacker/cbor/v2"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "github.com/zeebo/xxh3"
	_ "k8s.io/apiserver/pkg/apis/audit/v1"
	_ "k8s.io/apiserver/plugin/pkg/audit/buffered"
	_ "k8s.io/apiserver/plugin/pkg/audit/webhook"
	_ "sigs.k8s.io/yaml"
)

func main() {}
