package main

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A pod asked to run longer than a Duration holds keeps running; found by a review:
// the conversion overflowed and "1e10" or "Inf" finished the pod at once. "NaN" is
// no duration: ignored with a warning, the pod runs until deleted.
func TestAVeryLongFakeDurationKeepsThePodRunning(t *testing.T) {
	now := time.Now()
	for _, v := range []string{"1e10", "Inf", "NaN", "1e400"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n",
			Annotations: map[string]string{annotationDuration: v}}}
		if phase, code, _ := finishing(pod, now, now); phase != "" {
			t.Errorf("fake-duration-seconds %q: finished at once, phase %q code %d", v, phase, code)
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n",
		Annotations: map[string]string{annotationDuration: "2"}}}
	if phase, _, left := finishing(pod, now, now.Add(time.Second)); phase != "" || left != time.Second {
		t.Errorf("2 s, 1 s in: phase %q, left %v; want running, 1s left", phase, left)
	}
	if phase, _, _ := finishing(pod, now, now.Add(3*time.Second)); phase != corev1.PodSucceeded {
		t.Errorf("2 s, 3 s in: phase %q; want Succeeded", phase)
	}
}
