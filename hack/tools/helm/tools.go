//go:build tools

// Package tools pins helm, which tests/process/test_helm_chart.py runs to render the chart in
// deploy/helm (`helm lint`, `helm template`) and tests/node installs it with.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
