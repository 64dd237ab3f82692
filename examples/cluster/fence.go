//go:build !cluster_unfenced

package main

// checkFence makes a batch's transaction refuse to commit under a claim
// older than its partition's fence. The test builds the service with the
// tag cluster_unfenced, which drops the check, to see the test fail.
const checkFence = true
