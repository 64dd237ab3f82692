//go:build cluster_unfenced

package main

// checkFence is false in this build, for the test's mutant: a batch commits
// whatever its partition's fence says.
const checkFence = false
