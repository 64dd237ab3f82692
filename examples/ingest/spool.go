package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// spooled is an event in the spool file, one JSON object a line, in the
// order the events were accepted.
type spooled struct {
	Tenant   string          `json:"tenant"`
	ID       string          `json:"id"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Accepted uint64          `json:"accepted"`
}

// writeSpool writes evs to path whole: to a temporary file, synced, then
// renamed over path, so that a crash leaves the old file or the new one.
func writeSpool(path string, evs []event) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if err := encode(tmp, evs); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// appendEvents appends evs to path, synced.
func appendEvents(path string, evs []event) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if err := encode(f, evs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func encode(f *os.File, evs []event) error {
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range evs {
		if err := enc.Encode(spooled{e.Tenant, e.ID, e.Payload, e.accepted}); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Sync()
}

// readSpool reads the events of path, in order; none if it does not exist.
func readSpool(path string) ([]event, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []event
	dec := json.NewDecoder(bufio.NewReader(f))
	for dec.More() {
		var s spooled
		if err := dec.Decode(&s); err != nil {
			return nil, fmt.Errorf("%s: event %d: %w", path, len(evs)+1, err)
		}
		evs = append(evs, event{Tenant: s.Tenant, ID: s.ID, Payload: s.Payload, accepted: s.Accepted})
	}
	return evs, nil
}

func removeSpool(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
