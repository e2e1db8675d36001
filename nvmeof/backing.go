package nvmeof

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// Storage is what a target's namespace keeps its blocks in: a file, a
// block device, memory.
type Storage interface {
	io.ReaderAt
	io.WriterAt
	// Size is the storage's size in bytes; the namespace has Size divided
	// by its block size blocks.
	Size() int64
	// Sync makes what was written durable (Flush).
	Sync() error
}

// File is Storage in a file or block device.
type File struct {
	f    *os.File
	size int64
}

// OpenFile opens the file or block device at path for a namespace; size
// 0 takes its size (a block device's, or a file's), a larger size grows
// a file to it.
func OpenFile(path string, size int64) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("nvmeof: namespace: %w", err)
	}
	end, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("nvmeof: namespace %s: %w", path, err)
	}
	if size > end {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, fmt.Errorf("nvmeof: namespace %s: %w", path, err)
		}
		end = size
	}
	if size == 0 {
		size = end
	}
	if size == 0 {
		f.Close()
		return nil, fmt.Errorf("nvmeof: namespace %s is empty", path)
	}
	return &File{f: f, size: min(size, end)}, nil
}

func (f *File) ReadAt(p []byte, off int64) (int, error)  { return f.f.ReadAt(p, off) }
func (f *File) WriteAt(p []byte, off int64) (int, error) { return f.f.WriteAt(p, off) }

// Size is the namespace's size in bytes.
func (f *File) Size() int64 { return f.size }

// Sync is fsync.
func (f *File) Sync() error { return f.f.Sync() }

// Close closes the file.
func (f *File) Close() error { return f.f.Close() }

// Memory is Storage in memory: what a target serves when it has no
// disk, as a null_blk with memory_backed=1 does.
type Memory struct {
	mu  sync.RWMutex
	buf []byte
}

// NewMemory returns size bytes of zeroed storage.
func NewMemory(size int64) *Memory { return &Memory{buf: make([]byte, size)} }

func (m *Memory) ReadAt(p []byte, off int64) (int, error) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if off < 0 || off >= int64(len(m.buf)) {
		return 0, io.EOF
	}
	n := copy(p, m.buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *Memory) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if off < 0 || off+int64(len(p)) > int64(len(m.buf)) {
		return 0, fmt.Errorf("nvmeof: write of %d bytes at %d past the %d bytes of memory", len(p), off, len(m.buf))
	}
	return copy(m.buf[off:], p), nil
}

// Size is the storage's size in bytes.
func (m *Memory) Size() int64 { return int64(len(m.buf)) }

// Sync does nothing: memory is as durable as it gets.
func (m *Memory) Sync() error { return nil }
