package unitagent

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// The agent keeps, with each member of a relation, the member's settings
// as of the version relation-changed last ran for, and its unit's own
// settings there, so that the hooks can read a member that has left the
// scope (the controller deletes a unit's settings when it leaves) until
// its departure is done, and the unit's own once it has left itself
// (relation-broken). Kept settings are saved with the members: a change
// of them carries them (memberChange.Settings) in the journal record of
// the hook that delivered them, and the snapshot holds them in lines of
// their own after its first. In memory, a member's kept settings are
// only where they are on disk once saved, read again when a hook asks
// for them: a unit related to 10,000 units, each with settings of up to
// 64 KiB, keeps about a hundred bytes a member in memory, not 640 MiB.
// The unit's own settings, one a relation, stay in memory.

// keptSettings is a unit's settings as the agent keeps them: their JSON
// object in memory until a save writes them, then where they are on disk.
type keptSettings struct {
	data json.RawMessage
	at   diskRef
}

// diskRef is where a save wrote kept settings: in the line of n bytes at
// off of the journal, as change idx of its record, or of the snapshot
// (idx -1), which holds one member's settings a line after its first.
type diskRef struct {
	off int64
	n   int32
	idx int32
}

// snapshotLine is idx's value for a line of the snapshot.
const snapshotLine = -1

// frame makes a line of the journal or of the snapshot's kept settings:
// the payload's CRC-32C in 8 hex digits, a space, the payload, a newline.
func frame(payload []byte) []byte {
	line := make([]byte, 0, len(payload)+10)
	line = fmt.Appendf(line, "%08x ", crc32Of(payload))
	return append(append(line, payload...), '\n')
}

// keptReader reads kept settings from the unit's files, holding each
// file open once it read there, while they do not change: in a hook, or
// from the files a snapshot being written replaces. It keeps the journal
// record it read last: the changes of one record read one after another
// decode it once.
type keptReader struct {
	dir   string
	files map[bool]*os.File // by "is the snapshot"
	last  *journalRecord
	at    int64 // where last is in the journal
}

func newKeptReader(dir string) *keptReader {
	return &keptReader{dir: dir, files: map[bool]*os.File{}}
}

func (r *keptReader) close() {
	for _, f := range r.files {
		f.Close()
	}
}

// read returns k's settings: from memory if not saved yet, else from
// the line of the file that holds them.
func (r *keptReader) read(relation int64, unit string, k *keptSettings) (json.RawMessage, error) {
	if k.data != nil {
		return k.data, nil
	}
	snap := k.at.idx == snapshotLine
	f := r.files[snap]
	if f == nil {
		name := journalName
		if snap {
			name = snapshotName
		}
		var err error
		if f, err = os.Open(filepath.Join(r.dir, name)); err != nil {
			return nil, fmt.Errorf("read kept settings: %w", err)
		}
		r.files[snap] = f
	}
	var line []byte
	if snap || r.last == nil || r.at != k.at.off {
		line = make([]byte, k.at.n)
		if _, err := f.ReadAt(line, k.at.off); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("read kept settings: %w", err)
		}
	}
	var c memberChange
	if snap {
		payload, err := checkLine(line)
		if err != nil {
			return nil, fmt.Errorf("kept settings at byte %d of the snapshot: %w", k.at.off, err)
		}
		if err := json.Unmarshal(payload, &c); err != nil {
			return nil, fmt.Errorf("kept settings at byte %d of the snapshot: %w", k.at.off, err)
		}
	} else {
		rec := r.last
		if line != nil {
			var err error
			if rec, err = decodeRecord(line); err != nil {
				return nil, fmt.Errorf("kept settings at byte %d of the journal: %w", k.at.off, err)
			}
			r.last, r.at = rec, k.at.off
		}
		if int(k.at.idx) >= len(rec.Members) {
			return nil, fmt.Errorf("kept settings at byte %d of the journal: no change %d", k.at.off, k.at.idx)
		}
		c = rec.Members[k.at.idx]
	}
	if c.Relation != relation || c.Unit != unit || c.Settings == nil {
		return nil, fmt.Errorf("kept settings of %s in relation %d: the line at byte %d holds those of %q in relation %d",
			unit, relation, k.at.off, c.Unit, c.Relation)
	}
	return c.Settings, nil
}

// keptOf returns unit's kept settings in relation id and whether there
// are any. It reads the disk when they are saved, and is safe to call
// while a hook runs (the agent saves nothing meanwhile).
func (s *stateStore) keptOf(lr *localRelation, id int64, unit string) (map[string]string, bool, error) {
	k := lr.kept[unit]
	if k == nil {
		return nil, false, nil
	}
	r := newKeptReader(s.dir)
	defer r.close()
	data, err := r.read(id, unit, k)
	if err != nil {
		return nil, false, err
	}
	out := map[string]string{}
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, false, fmt.Errorf("kept settings of %s in relation %d: %w", unit, id, err)
	}
	return out, true, nil
}

// movedSettings is where a snapshot being written puts kept settings.
type movedSettings struct {
	k  *keptSettings
	at diskRef
}

// writeSnapshotLines writes the snapshot's first line, then a line for
// each member's kept settings, to w; it returns the size written and
// where each kept settings went.
func (s *stateStore) writeSnapshotLines(w io.Writer, first []byte, l *localState) (int64, []movedSettings, error) {
	bw := bufio.NewWriterSize(w, readBuffer)
	if _, err := bw.Write(first); err != nil {
		return 0, nil, fmt.Errorf("write unit state: %w", err)
	}
	off := int64(len(first))
	r := newKeptReader(s.dir)
	defer r.close()
	// In the order they are on disk, so that each journal record is read
	// once however many of its changes carry settings.
	type entry struct {
		relation int64
		unit     string
		k        *keptSettings
	}
	var all []entry
	for id, lr := range l.Relations {
		for unit, k := range lr.kept {
			all = append(all, entry{id, unit, k})
		}
	}
	slices.SortFunc(all, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.k.at.off, b.k.at.off), cmp.Compare(a.k.at.idx, b.k.at.idx))
	})
	moved := make([]movedSettings, 0, len(all))
	for _, e := range all {
		data, err := r.read(e.relation, e.unit, e.k)
		if err != nil {
			return 0, nil, err
		}
		payload, err := json.Marshal(memberChange{Relation: e.relation, Unit: e.unit, Settings: data})
		if err != nil {
			return 0, nil, fmt.Errorf("encode unit state: %w", err)
		}
		line := frame(payload)
		if _, err := bw.Write(line); err != nil {
			return 0, nil, fmt.Errorf("write unit state: %w", err)
		}
		moved = append(moved, movedSettings{k: e.k, at: diskRef{off: off, n: int32(len(line)), idx: snapshotLine}})
		off += int64(len(line))
	}
	if err := bw.Flush(); err != nil {
		return 0, nil, fmt.Errorf("write unit state: %w", err)
	}
	return off, moved, nil
}
