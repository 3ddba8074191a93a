// Command kstatus prints the kstatus status of every object in the YAML or JSON files it is given:
// what Flux's healthChecks and `wait` compute (sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute).
//
// One JSON line per object: {"file", "kind", "name", "status", "message"}. Exit code 1 when a file
// cannot be read or an object cannot be computed, 2 on a wrong command line.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

type result struct {
	File    string `json:"file"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func objects(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		raw, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, err
		}
		if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || string(trimmed) == "null" {
			continue // an empty document, e.g. only comments
		}
		// The unstructured decoder keeps integers as int64, as kstatus reads metadata.generation.
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kstatus FILE...  (YAML or JSON; prints one JSON line per object)")
		os.Exit(2)
	}
	encoder := json.NewEncoder(os.Stdout)
	code := 0
	for _, path := range os.Args[1:] {
		objs, err := objects(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %s: %v\n", path, err)
			code = 1
			continue
		}
		for _, obj := range objs {
			res, err := status.Compute(obj)
			if err != nil {
				fmt.Fprintf(os.Stderr, "kstatus: %s: %s/%s: %v\n", path, obj.GetKind(), obj.GetName(), err)
				code = 1
				continue
			}
			_ = encoder.Encode(result{path, obj.GetKind(), obj.GetName(), string(res.Status), res.Message})
		}
	}
	os.Exit(code)
}
