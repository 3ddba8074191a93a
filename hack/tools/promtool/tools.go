//go:build tools

// Package tools pins promtool, Prometheus' own checker of rule files (`promtool check rules`, `promtool
// test rules`), which tests/process/test_alerts.py runs on deploy/monitoring. Built with the
// remove_all_sd tag: service discovery plugins are not needed to check rules.
package tools

import _ "github.com/prometheus/prometheus/cmd/promtool"
