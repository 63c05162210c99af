package regularfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ratekey/ratekey/internal/regularfile"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	big := filepath.Join(dir, "big")
	fifo := filepath.Join(dir, "fifo")
	if err := os.WriteFile(small, []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, []byte("01234567890"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path    string
		want    string // contents, or a substring of the error
		tooBig  bool
		wantErr bool
	}{
		{path: small, want: "0123456789"},
		{path: big, want: big + ": file too large: 11 bytes, at most 10", tooBig: true, wantErr: true},
		{path: "/dev/zero", want: "/dev/zero: not a regular file (a device)", wantErr: true},
		{path: "/dev/urandom", want: "/dev/urandom: not a regular file (a device)", wantErr: true},
		{path: dir, want: dir + ": not a regular file (a directory)", wantErr: true},
		{path: fifo, want: fifo + ": not a regular file (a named pipe)", wantErr: true},
		{path: filepath.Join(dir, "missing"), want: "no such file or directory", wantErr: true},
	} {
		b, err := regularfile.Read(c.path, 10)
		switch {
		case !c.wantErr && (err != nil || string(b) != c.want):
			t.Errorf("Read(%s) = %q, %v; want %q", c.path, b, err, c.want)
		case c.wantErr && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Read(%s) error = %v; want one containing %q", c.path, err, c.want)
		case c.wantErr && errors.Is(err, regularfile.ErrTooLarge) != c.tooBig:
			t.Errorf("Read(%s): errors.Is(err, ErrTooLarge) = %v", c.path, !c.tooBig)
		}
	}
}
