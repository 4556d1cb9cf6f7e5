package relay

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A data directory belongs to one relay at a time: its wheel, its binding
// and its transactional ID would otherwise be shared by two processes, and
// two relays with one transactional ID fence each other. New takes an
// exclusive lock on <data dir>/lock (flock, released when the process
// ends, also by kill -9) and keeps it until Close.

const (
	lockFile   = "lock"
	txnIDFile  = "transactional-id.json"
	txnIDBytes = 6 // random bytes in a generated transactional ID
)

// DataDirInUseError is returned by [New] when another process holds the
// data directory's lock.
type DataDirInUseError struct {
	Dir string
	PID int // the holder's process ID as it wrote it; 0 if unknown
}

func (e *DataDirInUseError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("relay: data directory %s is in use by %s (one relay per data directory: give each relay its own KDELAY_DATA_DIR)", e.Dir, who)
}

// dirLock is a held data-directory lock.
type dirLock struct{ f *os.File }

// lockDataDir creates dir if needed and takes its lock without waiting.
func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("relay: data directory: %w", err)
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("relay: open %s: %w", path, err)
	}
	held, err := flockExclusive(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("relay: lock %s: %w", path, err)
	}
	if !held {
		pid := readPID(f)
		f.Close()
		return nil, &DataDirInUseError{Dir: dir, PID: pid}
	}
	// The holder's PID is for the error message only; the lock is the flock.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &dirLock{f: f}, nil
}

func readPID(f *os.File) int {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	return pid
}

// unlock releases the lock; safe on nil.
func (l *dirLock) unlock() {
	if l != nil && l.f != nil {
		l.f.Close() // closing the descriptor releases the flock
		l.f = nil
	}
}

// storedTxnID is the transactional ID a data directory keeps, with the
// cluster and group it was made for.
type storedTxnID struct {
	ClusterID       string `json:"cluster_id"`
	Group           string `json:"group"`
	TransactionalID string `json:"transactional_id"`
}

// dataDirTxnID returns the transactional ID kept in dir for this cluster
// and group, creating it on first use: kdelay-<group>-<host>-<random>.
// Unique by construction (random, and one relay per data directory) and
// stable across the relay's restarts on the same directory, so that a
// restarted relay aborts its predecessor's open transaction at once. A
// data directory reused for another cluster or group gets a new ID.
func dataDirTxnID(dir, clusterID, group, host string) (string, error) {
	path := filepath.Join(dir, txnIDFile)
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		var s storedTxnID
		if json.Unmarshal(data, &s) == nil && s.ClusterID == clusterID && s.Group == group && s.TransactionalID != "" {
			return s.TransactionalID, nil
		}
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("relay: read %s: %w", path, err)
	}
	b := make([]byte, txnIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("relay: transactional ID: %w", err)
	}
	if host == "" {
		host = "relay"
	}
	s := storedTxnID{ClusterID: clusterID, Group: group, TransactionalID: "kdelay-" + group + "-" + host + "-" + hex.EncodeToString(b)}
	data, err = json.MarshalIndent(s, "", "  ")
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(dir, txnIDFile, append(data, '\n')); err != nil {
		return "", err
	}
	return s.TransactionalID, nil
}

// writeFileAtomic replaces dir/name with data (write, fsync, rename).
func writeFileAtomic(dir, name string, data []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("relay: data directory: %w", err)
	}
	tmp := filepath.Join(dir, name+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("relay: write %s: %w", name, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("relay: write %s in %s: %w", name, dir, err)
	}
	return nil
}
