// Package deps keeps the Prometheus Operator's API types in this module's
// go.mod and go.sum, so build.sh can run controller-gen over them offline.
package deps

import _ "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
