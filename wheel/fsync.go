package wheel

import "os"

// fsync flushes f (a file or a directory) to stable storage. Every fsync of
// the wheel goes through it, so that a test can model power loss: syncHook
// sees each completed one and keeps what a crash would leave on disk.
func fsync(f *os.File) error {
	if err := f.Sync(); err != nil {
		return err
	}
	if syncHook != nil {
		syncHook(f.Name())
	}
	return nil
}

// syncHook, nil outside tests, is called with the path of each file or
// directory right after its fsync returned.
var syncHook func(path string)
