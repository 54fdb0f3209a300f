package charm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"
)

// MaxSize is the most bytes a packed charm may have.
const MaxSize = 32 << 20

// maxUnpacked bounds the bytes a charm archive unpacks to (its tar stream:
// contents and headers), against archives that compress too well.
const maxUnpacked = 512 << 20

// ArchiveInfo describes a packed charm.
type ArchiveInfo struct {
	Charm *Charm
	// SHA256 is the hex sha256 of the archive: its content address.
	SHA256 string
	// Size is the archive's length in bytes.
	Size int64
}

// epoch is the modification time of every archive entry.
var epoch = time.Unix(0, 0)

// Pack validates the charm in dir (as ReadDir does) and writes it to w as a
// gzip-compressed tar archive of all its files, directories and symlinks.
// The archive is deterministic: entries sorted by name, times and owners
// zeroed, modes normalized to 0755 for directories and executable files and
// 0644 for other files, so the same directory packs to the same bytes (with
// the same Go release). It fails, having written part of an archive, when
// the archive grows over MaxSize.
func Pack(dir string, w io.Writer) (ArchiveInfo, error) {
	return pack(dir, w, MaxSize)
}

// pack is Pack with a size limit.
func pack(dir string, w io.Writer, limit int64) (ArchiveInfo, error) {
	c, t, err := scanDir(dir)
	if err != nil {
		return ArchiveInfo{}, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return ArchiveInfo{}, fmt.Errorf("pack charm: %w", err)
	}
	defer root.Close()
	h := sha256.New()
	out := &limitWriter{w: io.MultiWriter(w, h), limit: limit,
		err: tooLargef("charm archive is over the %s limit", sizeString(limit))}
	zw, err := gzip.NewWriterLevel(out, gzip.DefaultCompression)
	if err != nil {
		return ArchiveInfo{}, fmt.Errorf("pack charm: %w", err)
	}
	tw := tar.NewWriter(&limitWriter{w: zw, limit: maxUnpacked,
		err: tooLargef("charm unpacks to over %s", sizeString(maxUnpacked))})
	for _, e := range t.sorted() {
		if err := writeEntry(tw, root, e); err != nil {
			return ArchiveInfo{}, fmt.Errorf("pack charm %s: %w", dir, err)
		}
	}
	if err := tw.Close(); err != nil {
		return ArchiveInfo{}, fmt.Errorf("pack charm %s: %w", dir, err)
	}
	if err := zw.Close(); err != nil {
		return ArchiveInfo{}, fmt.Errorf("pack charm %s: %w", dir, err)
	}
	return ArchiveInfo{Charm: c, SHA256: hex.EncodeToString(h.Sum(nil)), Size: out.n}, nil
}

func writeEntry(tw *tar.Writer, root *os.Root, e *entry) error {
	hdr := &tar.Header{Name: e.name, ModTime: epoch, Format: tar.FormatPAX}
	switch e.kind {
	case kindDir:
		hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, e.name+"/", 0o755
		return tw.WriteHeader(hdr)
	case kindSymlink:
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.link, 0o777
		return tw.WriteHeader(hdr)
	}
	f, err := root.Open(e.name)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s changed while being packed", e.name)
	}
	hdr.Typeflag, hdr.Size, hdr.Mode = tar.TypeReg, info.Size(), 0o644
	if e.exec {
		hdr.Mode = 0o755
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s changed while being packed", e.name)
		}
		return err
	}
	return nil
}

// limitWriter passes writes on until limit bytes have gone through, then
// fails with err.
type limitWriter struct {
	w     io.Writer
	n     int64
	limit int64
	err   error
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n+int64(len(p)) > l.limit {
		return 0, l.err
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	return n, err
}

// ReadArchive reads a packed charm of at most limit bytes (MaxSize when limit
// is 0 or less) from r and validates it without extracting it: its tree (as
// Extract would accept it), metadata.yaml, config.yaml and actions.yaml
// (and that each action has its executable). It returns the
// charm and the archive's bytes.
func ReadArchive(r io.Reader, limit int64) (*Charm, []byte, error) {
	if limit <= 0 {
		limit = MaxSize
	}
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read charm archive: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, nil, tooLargef("charm archive is over the %s limit", sizeString(limit))
	}
	t, err := archiveTree(data)
	if err != nil {
		return nil, nil, err
	}
	c, err := load(t, func(names []string) (map[string][]byte, error) {
		want := make(map[string][]byte, len(names))
		for _, n := range names {
			want[n] = nil
		}
		err := walkArchive(data, func(hdr *tar.Header, name string, r io.Reader) error {
			if _, ok := want[name]; !ok || hdr.Typeflag != tar.TypeReg {
				return nil
			}
			b, err := io.ReadAll(io.LimitReader(r, maxYAMLSize+1))
			want[name] = b
			if err != nil {
				return archiveError(err)
			}
			return nil
		})
		return want, err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("charm archive: %w", err)
	}
	return c, data, nil
}

// archiveTree reads the tree of an archive and checks it.
func archiveTree(data []byte) (*tree, error) {
	t := newTree()
	err := walkArchive(data, func(hdr *tar.Header, name string, _ io.Reader) error {
		e := &entry{name: name}
		switch hdr.Typeflag {
		case tar.TypeDir:
			e.kind = kindDir
		case tar.TypeReg:
			e.kind, e.size, e.exec = kindFile, hdr.Size, hdr.Mode&0o111 != 0
		case tar.TypeSymlink:
			e.kind, e.link = kindSymlink, hdr.Linkname
		default:
			return invalidf("%q is not a regular file, directory or symlink (tar type %q)", name, hdr.Typeflag)
		}
		return t.add(e)
	})
	if err != nil {
		return nil, fmt.Errorf("charm archive: %w", err)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("charm archive: %w", err)
	}
	return t, nil
}

// walkArchive calls fn for each entry of a gzip-compressed tar archive with
// the entry's cleaned name (without "./" or a trailing "/"), skipping the
// root directory and global headers, and bounding the bytes unpacked. It
// returns fn's errors as they are.
func walkArchive(data []byte, fn func(hdr *tar.Header, name string, r io.Reader) error) error {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return invalidf("not a gzip-compressed tar archive: %v", err)
	}
	lr := &limitReader{r: zr, n: maxUnpacked, err: tooLargef("charm unpacks to over %s", sizeString(maxUnpacked))}
	tr := tar.NewReader(lr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return archiveError(err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		for strings.HasPrefix(name, "./") {
			name = name[2:]
		}
		if name == "." || name == "" && hdr.Typeflag == tar.TypeDir {
			continue
		}
		if err := fn(hdr, name, tr); err != nil {
			return err
		}
	}
	// Read to the end of the gzip stream, so that its checksum is checked.
	if _, err := io.Copy(io.Discard, lr); err != nil {
		return archiveError(err)
	}
	return nil
}

// archiveError turns a failure to read the archive into invalid input.
func archiveError(err error) error {
	if errors.Is(err, ErrInvalid) {
		return err
	}
	return invalidf("bad archive: %v", err)
}

// limitReader reads from r until n bytes have been read, then fails with
// err (io.LimitReader would report a clean end instead).
type limitReader struct {
	r   io.Reader
	n   int64
	err error
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, l.err
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// Extract unpacks a charm archive into dir, which is created if absent and
// must otherwise be empty. It checks the whole archive before writing
// anything: entry names relative and inside the charm, only files,
// directories and symlinks, symlinks resolving inside the charm, the total
// size bounded. Files keep their executable bit. On error dir may hold part
// of the charm; extract into a fresh directory and remove it on failure.
func Extract(data []byte, dir string) error {
	if _, err := archiveTree(data); err != nil {
		return err
	}
	return extractChecked(data, dir)
}

// HasHooks reports whether the charm archive in data has hooks or actions:
// anything named hooks or actions at its top. A unit of a charm without
// them needs no copy of it (Cache.DeployHooksFrom). It checks the archive
// as Extract does.
func HasHooks(data []byte) (bool, error) {
	t, err := archiveTree(data)
	if err != nil {
		return false, err
	}
	return t.hooked(), nil
}

// extractChecked is Extract of an archive archiveTree has checked.
func extractChecked(data []byte, dir string) error {
	if err := emptyDir(dir, "extract charm"); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("extract charm: %w", err)
	}
	defer root.Close()
	// One buffer for every file: io.Copy would hand each file to
	// os.File's ReadFrom, which copies through a buffer of 32 KiB made
	// for each call.
	buf := make([]byte, 8<<10)
	err = walkArchive(data, func(hdr *tar.Header, name string, r io.Reader) error {
		if hdr.Typeflag == tar.TypeDir {
			return root.MkdirAll(name, 0o755)
		}
		if parent := path.Dir(name); parent != "." {
			if err := root.MkdirAll(parent, 0o755); err != nil {
				return err
			}
		}
		if hdr.Typeflag == tar.TypeSymlink {
			return root.Symlink(hdr.Linkname, name)
		}
		mode := os.FileMode(0o644)
		if hdr.Mode&0o111 != 0 {
			mode = 0o755
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		if _, err := io.CopyBuffer(struct{ io.Writer }{f}, r, buf); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		return fmt.Errorf("extract charm into %s: %w", dir, err)
	}
	return nil
}
