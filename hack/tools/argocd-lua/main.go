// Command argocd-lua computes the Argo CD health of objects as Argo CD's application controller does,
// with Argo CD's own code: the resource overrides come from an argocd-cm ConfigMap through
// util/settings (SettingsManager.GetResourceOverrides, which turns resource.customizations.health.<group>_<Kind>
// and resource.customizations.useOpenLibs.<group>_<Kind> into ResourceOverride{HealthLua, UseOpenLibs}),
// and each object goes through gitops-engine's health.GetResourceHealth with lua.ResourceHealthOverrides,
// the call of controller/health: VM.GetHealthScript picks the script and its UseOpenLibs, ExecuteHealthLua
// runs it, and a script error becomes Unknown with the error as message.
//
//	argocd-lua -cm argocd-cm.yaml health_test.yaml...  every case: a JSON list of {case, expected, got,
//	                                                   openLibs}; exit 1 when a case does not match
//	argocd-lua -cm argocd-cm.yaml -object obj.yaml     one object: {status, message, openLibs}
//
// Exit code 2 on a wrong command line or a file that cannot be read.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/argoproj/argo-cd/v3/pkg/apis/application/v1alpha1"
	"github.com/argoproj/argo-cd/v3/util/lua"
	"github.com/argoproj/argo-cd/v3/util/settings"
	"github.com/argoproj/gitops-engine/pkg/health"
	log "github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"
)

type status struct {
	Status   string `json:"status"`
	Message  string `json:"message"`
	OpenLibs bool   `json:"openLibs"`
}

type result struct {
	Case     string              `json:"case"`
	Expected health.HealthStatus `json:"expected"`
	Got      status              `json:"got"`
}

// overrides reads the ConfigMap as Argo CD's settings manager does, from a (fake) cluster that holds it:
// it must be named argocd-cm and labeled app.kubernetes.io/part-of=argocd, as in a real install.
func overrides(path string) (map[string]v1alpha1.ResourceOverride, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if cm.Namespace == "" {
		cm.Namespace = "argocd"
	}
	mgr := settings.NewSettingsManager(context.Background(), fake.NewClientset(&cm), cm.Namespace)
	return mgr.GetResourceOverrides()
}

func object(path string) (*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	obj := &unstructured.Unstructured{} // as the controller's cache holds it: JSON numbers as int64
	if err := obj.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return obj, nil
}

func evaluate(overrides map[string]v1alpha1.ResourceOverride, obj *unstructured.Unstructured) status {
	_, openLibs, _ := lua.VM{ResourceOverrides: overrides}.GetHealthScript(obj) // reported only
	got, err := health.GetResourceHealth(obj, lua.ResourceHealthOverrides(overrides))
	if got == nil { // no health check for the kind
		got = &health.HealthStatus{}
		if err != nil {
			got.Message = err.Error()
		}
	}
	return status{Status: string(got.Status), Message: got.Message, OpenLibs: openLibs}
}

func main() {
	cmPath := flag.String("cm", "", "the argocd-cm ConfigMap YAML")
	objPath := flag.String("object", "", "one object to evaluate instead of health_test.yaml files")
	flag.Parse()
	fail := func(err error) { fmt.Fprintln(os.Stderr, "argocd-lua:", err); os.Exit(2) }
	if *cmPath == "" || (*objPath == "") == (flag.NArg() == 0) {
		fail(fmt.Errorf("usage: argocd-lua -cm argocd-cm.yaml (-object obj.yaml | health_test.yaml...)"))
	}
	log.SetLevel(log.WarnLevel) // the settings manager's informer chatter
	ovr, err := overrides(*cmPath)
	if err != nil {
		fail(err)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	out.SetEscapeHTML(false) // Lua errors name the chunk <string>
	if *objPath != "" {
		obj, err := object(*objPath)
		if err != nil {
			fail(err)
		}
		_ = out.Encode(evaluate(ovr, obj))
		return
	}
	results, mismatches := []result{}, 0
	for _, testPath := range flag.Args() {
		data, err := os.ReadFile(testPath)
		if err != nil {
			fail(err)
		}
		var suite struct { // util/lua/health_test.go's TestStructure
			Tests []struct {
				InputPath    string              `json:"inputPath"`
				HealthStatus health.HealthStatus `json:"healthStatus"`
			} `json:"tests"`
		}
		if err := yaml.UnmarshalStrict(data, &suite); err != nil {
			fail(fmt.Errorf("%s: %w", testPath, err))
		}
		dir := filepath.Dir(testPath)
		for _, tc := range suite.Tests {
			obj, err := object(filepath.Join(dir, tc.InputPath))
			if err != nil {
				fail(err)
			}
			got := evaluate(ovr, obj)
			if got.Status != string(tc.HealthStatus.Status) || got.Message != tc.HealthStatus.Message {
				mismatches++
			}
			results = append(results, result{Case: filepath.Base(dir) + "/" + tc.InputPath, Expected: tc.HealthStatus, Got: got})
		}
	}
	_ = out.Encode(results)
	if mismatches > 0 {
		fmt.Fprintf(os.Stderr, "argocd-lua: %d of %d cases do not match\n", mismatches, len(results))
		os.Exit(1)
	}
}
