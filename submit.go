package ferry

// This file is the rest of Submit (Ferry.Submit, with its doc, is in
// ferry.go): one input, admitted on the caller's goroutine and answered
// through done, off the loop.

// ignore is the done of a Submit that passed none.
func ignore[O any](O, error) {}
