// Package regularfile reads a file an operator names in a config (a key, a
// secret, a pepper, the config itself) with a bound: only a regular file,
// and at most a given size. Without it, `public_key_file: /dev/zero` or
// `pepper_file: /dev/urandom` reads until memory runs out, and a FIFO
// blocks a reload forever.
package regularfile

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// ErrTooLarge is wrapped by the error [Read] returns for a file larger than
// its bound. Test with errors.Is.
var ErrTooLarge = errors.New("file too large")

// Read returns the contents of the file at path when it is a regular file
// (after following symbolic links) of at most max bytes. Otherwise it
// returns an error that names neither the contents nor more of path than
// the os package does: the *PathError of Open or Stat, "not a regular
// file" (a device, a FIFO, a directory, a socket), or ErrTooLarge. A file
// that grows while it is read is read up to max+1 bytes and refused too.
// Safe for concurrent use.
func Read(path string, max int64) ([]byte, error) {
	// Stat before opening: opening a FIFO for reading blocks until a writer
	// comes, and opening some devices has effects of its own.
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, kind(info.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The file opened may not be the one stated (a rename in between): check
	// again on the open file, whose size then bounds the read.
	if info, err = f.Stat(); err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, kind(info.Mode()))
	}
	if info.Size() > max {
		return nil, fmt.Errorf("%s: %w: %d bytes, at most %d", path, ErrTooLarge, info.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w: more than %d bytes", path, ErrTooLarge, max)
	}
	return b, nil
}

// kind names a non-regular file mode for an error message.
func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "mode " + m.Type().String()
}
