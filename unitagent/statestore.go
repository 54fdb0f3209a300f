package unitagent

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// The local state on disk, in the unit's data directory, is a snapshot and
// a journal of what changed since:
//
//	state.json  the snapshot, replaced atomically (temp file, fsync,
//	            rename, fsync of the directory): a first line
//	            {"format":3,"seq":S,"state":{…},"members":{"<rel>":{"<unit>":<version>}},"own":{"<rel>":{…}}}
//	            then a line for each member's kept settings (kept.go):
//	            <CRC-32C of the JSON, 8 hex digits> {"r":<rel>,"u":"<unit>","s":{…}}
//	state.log   the journal, appended to and fsynced, one record a line:
//	            <CRC-32C of the JSON, 8 hex digits> {"seq":S+1,"state":{…},"members":[<changes>]}
//
// "state" is the head: the whole local state but the relations' members
// and their settings, a few hundred bytes whatever their number. Each
// save appends one record holding the head and the members' changes
// since the previous save (one for a relation hook, with the settings it
// delivered), so that saving costs the same at 10 members or at 10,000;
// the state is the snapshot's, then each record's head in turn with its
// changes applied to the members. Both files are read a line at a time,
// and a member's kept settings stay where they are on disk. A record is
// durable once fsynced, and whole or not there: one cut short by a crash
// is the last line, and its checksum (or its missing newline) tells it,
// so it is ignored as if never written. Anything wrong before the last
// line is damage, reported as such.
//
// Once the journal outgrows both its compactMinBytes and twice the snapshot,
// the next save writes a new snapshot with a higher seq, then empties the
// journal: a crash between the two leaves records the snapshot already
// holds (their seq is not above its own), which loading skips. The first
// save after loading a journal with a torn or stale tail, a state.json of
// an earlier format (format 2, without settings; or of before the
// journal, which held everything, members within their relations: both
// still load), or a failed write also writes a snapshot, so that nothing
// is ever appended after bytes that are not a whole record.
const (
	snapshotName = "state.json"
	journalName  = "state.log"
	stateFormat  = 3
)

// DataFiles names what a dead unit's directory usually holds alone, if
// anything: its journal (a unit of a charm without hooks has no charm
// directory, and writes a snapshot only after many records). Its machine
// agent removes such a directory without reading it; one that holds more
// is read. Naming the snapshot too cost a unit of a charm with hooks,
// whose directory holds its charm, two unlinks and two rmdirs more, each
// failing.
var DataFiles = []string{journalName}

// defaultCompactMinBytes is the size the journal may reach before it is
// folded into a new snapshot, whatever the snapshot's size.
const defaultCompactMinBytes = 64 << 10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapshotFile is state.json's first line.
type snapshotFile struct {
	Format  int                        `json:"format"`
	Seq     uint64                     `json:"seq"`
	State   json.RawMessage            `json:"state"`
	Members map[int64]map[string]int64 `json:"members,omitempty"`
	Own     map[int64]json.RawMessage  `json:"own,omitempty"`
}

// journalRecord is one line of state.log, after its checksum.
type journalRecord struct {
	Seq     uint64          `json:"seq"`
	State   json.RawMessage `json:"state"`
	Members []memberChange  `json:"members,omitempty"`
}

// stateStore keeps one unit's local state on disk. It is not safe for
// concurrent use: the agent's loop is its only user.
type stateStore struct {
	storeSettings
	// seq numbers the last record written, or the snapshot when none has
	// been written since.
	seq uint64
	// journalBytes counts the whole records in the journal.
	journalBytes int64
	// journalSynced says that the journal's directory entry is known to
	// be on disk: the directory was synced since the file was created.
	// Until then each synced append, and syncWritten, syncs the directory
	// too.
	journalSynced bool
	snapshotBytes int64
	// head is the head as last saved: a save that would record the same
	// head and no member change is skipped.
	head []byte
	// rewrite makes the next save write a snapshot.
	rewrite bool
	// unsynced says a record written commitWritten is not synced yet: a
	// crash of the process keeps it, a crash of the machine may lose it.
	// The next sync of the journal covers it. (A record settle wrote
	// unsynced needs no sync, and does not set it.)
	unsynced bool
	// later is the state a change of which was left in memory
	// (commitLazy) for the next record, syncWritten or settle to write.
	later *localState
	// empty says the directory is not there (or new: Config.New), so
	// that the first load has no files to read.
	empty bool
	// dirMade says the directory is there: until then the first write
	// makes it (makeDir).
	dirMade bool
}

// storeSettings are what a stateStore keeps across a load: where it
// writes, and how (tests change the last four).
type storeSettings struct {
	dir string
	// syncFile makes a file's content durable: (*os.File).Sync, but for
	// tests that count the syncs.
	syncFile func(*os.File) error
	// settleChanges is how many members' changes commitLazy may leave in
	// memory alone (defaultSettleChanges).
	settleChanges int
	// compactMinBytes is the size the journal may reach before it is
	// folded into a new snapshot (defaultCompactMinBytes; less in tests,
	// to fold often).
	compactMinBytes int64
	// crash, when set (by tests), is called at each point of a save where
	// a crash leaves the files in a state of their own; an error stops the
	// save there, as a crash would.
	crash func(point string) error
}

func newStateStore(dir string) *stateStore {
	return &stateStore{storeSettings: storeSettings{dir: dir, syncFile: (*os.File).Sync, settleChanges: defaultSettleChanges, compactMinBytes: defaultCompactMinBytes}}
}

func (s *stateStore) path(name string) string { return filepath.Join(s.dir, name) }

func (s *stateStore) crashPoint(point string) error {
	if s.crash == nil {
		return nil
	}
	return s.crash(point)
}

// makeDir makes the unit's directory, and its parents if need be, unless
// it is there: each write calls it first, so that an agent that never
// writes never makes one.
func (s *stateStore) makeDir() error {
	if s.dirMade {
		return nil
	}
	err := os.Mkdir(s.dir, 0o700)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(s.dir), 0o700); err != nil {
			return fmt.Errorf("unit directory: %w", err)
		}
		err = os.Mkdir(s.dir, 0o700)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("unit directory: %w", err)
	}
	s.dirMade = true
	return nil
}

// load reads the state from the snapshot and the journal (none to read
// in a directory that is not there).
func (s *stateStore) load() (*localState, error) {
	empty := s.empty
	*s = stateStore{storeSettings: s.storeSettings, dirMade: s.dirMade}
	l := newLocalState()
	var err error
	if !empty {
		if l, err = s.read(l); err != nil {
			return nil, err
		}
	}
	if s.head, err = json.Marshal(l); err != nil {
		return nil, fmt.Errorf("encode unit state: %w", err)
	}
	return l, nil
}

// read reads the snapshot, if any, and replays the journal, if any, over
// it (over l when there is no snapshot).
func (s *stateStore) read(l *localState) (*localState, error) {
	f, err := os.Open(s.path(snapshotName))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read unit state: %w", err)
	default:
		l, err = s.readSnapshot(bufio.NewReaderSize(f, readBuffer))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("unit state %s is damaged: %w", s.path(snapshotName), err)
		}
	}
	f, err = os.Open(s.path(journalName))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("read unit state journal: %w", err)
	default:
		// Found, but perhaps created by an agent that died before it
		// synced the directory: the first append syncs it.
		l, err = s.replay(l, bufio.NewReaderSize(f, readBuffer))
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("unit state journal %s is damaged: %w", s.path(journalName), err)
		}
	}
	return l, nil
}

// readBuffer is the size of the buffers the files are read through.
const readBuffer = 64 << 10

// readSnapshot reads state.json: its first line, then the members' kept
// settings, a line each, which it leaves where they are (a state.json of
// an earlier format has neither: it is read whole).
func (s *stateStore) readSnapshot(br *bufio.Reader) (*localState, error) {
	first, err := br.ReadBytes('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var probe struct {
		Format int `json:"format"`
	}
	if json.Unmarshal(first, &probe) != nil || probe.Format != stateFormat {
		// An earlier format, perhaps on several lines, or damage.
		rest, err := io.ReadAll(br)
		if err != nil {
			return nil, err
		}
		data := append(first, rest...)
		s.snapshotBytes = int64(len(data))
		return s.decodeSnapshot(data)
	}
	l, err := s.decodeSnapshot(first)
	if err != nil {
		return nil, err
	}
	off := int64(len(first))
	for {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		payload, err := checkLine(line)
		if err != nil {
			return nil, fmt.Errorf("kept settings at byte %d: %w", off, err)
		}
		var c struct {
			Relation int64  `json:"r"`
			Unit     string `json:"u"`
		}
		if err := json.Unmarshal(payload, &c); err != nil {
			return nil, fmt.Errorf("kept settings at byte %d: %w", off, err)
		}
		lr := l.Relations[c.Relation]
		if lr == nil {
			return nil, fmt.Errorf("kept settings at byte %d: of relation %d, which the state does not hold", off, c.Relation)
		}
		lr.keep(c.Unit, &keptSettings{at: diskRef{off: off, n: int32(len(line)), idx: snapshotLine}})
		off += int64(len(line))
	}
	s.snapshotBytes = off
	return l, nil
}

// decodeSnapshot decodes state.json, of either format.
func (s *stateStore) decodeSnapshot(data []byte) (*localState, error) {
	var probe struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, err
	}
	l := newLocalState()
	switch probe.Format {
	case 0:
		// Before the journal, state.json was the whole state, members
		// within their relations. It is rewritten in the new format by
		// the first save.
		var members struct {
			Relations map[int64]struct {
				Members map[string]int64 `json:"members"`
			} `json:"relations"`
		}
		if err := json.Unmarshal(data, l); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(data, &members); err != nil {
			return nil, err
		}
		normalize(l)
		for id, r := range members.Relations {
			if lr := l.Relations[id]; lr != nil && r.Members != nil {
				lr.Members = r.Members
			}
		}
		s.rewrite = true
		return l, nil
	case 2, stateFormat:
		// Format 2 is format 3 without settings, on one line: rewritten in
		// format 3 by the first save.
		var snap snapshotFile
		if err := json.Unmarshal(data, &snap); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(snap.State, l); err != nil {
			return nil, err
		}
		normalize(l)
		for id, m := range snap.Members {
			if lr := l.Relations[id]; lr != nil && m != nil {
				lr.Members = m
			}
		}
		for id, own := range snap.Own {
			if lr := l.Relations[id]; lr != nil {
				lr.own = own
			}
		}
		s.seq = snap.Seq
		s.rewrite = s.rewrite || probe.Format != stateFormat
		return l, nil
	}
	return nil, fmt.Errorf("unknown format %d", probe.Format)
}

// replay applies the journal's records, read from br, to l, the
// snapshot's state.
func (s *stateStore) replay(l *localState, br *bufio.Reader) (*localState, error) {
	snapSeq := s.seq
	fresh := false
	for off := int64(0); ; {
		line, err := br.ReadBytes('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return l, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("read at byte %d: %w", off, err)
		}
		last := err != nil
		if !last {
			_, err := br.Peek(1)
			last = errors.Is(err, io.EOF)
		}
		rec, err := decodeRecord(line)
		if err != nil {
			if last {
				// The last record, cut short by a crash: it was never
				// saved. The next save starts afresh.
				s.rewrite = true
				return l, nil
			}
			return nil, fmt.Errorf("record at byte %d: %w", off, err)
		}
		switch {
		case rec.Seq <= snapSeq && !fresh:
			// Already in the snapshot: the journal was not emptied after
			// it was written.
			s.rewrite = true
		case rec.Seq != s.seq+1:
			return nil, fmt.Errorf("record at byte %d is number %d, want %d", off, rec.Seq, s.seq+1)
		default:
			if l, err = replayRecord(l, rec, off, len(line)); err != nil {
				return nil, fmt.Errorf("record at byte %d: %w", off, err)
			}
			s.seq, fresh = rec.Seq, true
		}
		off += int64(len(line))
		s.journalBytes = off
	}
}

// decodeRecord decodes one line of the journal, newline included.
func decodeRecord(line []byte) (*journalRecord, error) {
	payload, err := checkLine(line)
	if err != nil {
		return nil, err
	}
	rec := &journalRecord{}
	if err := json.Unmarshal(payload, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// checkLine returns the payload of a line frame made, newline included,
// once its checksum is checked.
func checkLine(line []byte) ([]byte, error) {
	if len(line) < 10 || line[len(line)-1] != '\n' || line[8] != ' ' {
		return nil, errors.New("not a whole record")
	}
	var sum [4]byte
	if _, err := hex.Decode(sum[:], line[:8]); err != nil {
		return nil, errors.New("not a whole record")
	}
	payload := line[9 : len(line)-1]
	if crc32Of(payload) != uint32(sum[0])<<24|uint32(sum[1])<<16|uint32(sum[2])<<8|uint32(sum[3]) {
		return nil, errors.New("checksum mismatch")
	}
	return payload, nil
}

func crc32Of(payload []byte) uint32 { return crc32.Checksum(payload, castagnoli) }

// replayRecord returns the state after rec, the line of n bytes at off
// of the journal: its head, with the members (and settings) of the
// relations it still holds carried over from l and its changes applied.
func replayRecord(l *localState, rec *journalRecord, off int64, n int) (*localState, error) {
	next := newLocalState()
	if err := json.Unmarshal(rec.State, next); err != nil {
		return nil, err
	}
	normalize(next)
	for id, lr := range next.Relations {
		if old := l.Relations[id]; old != nil {
			lr.Members, lr.kept, lr.own = old.Members, old.kept, old.own
		}
	}
	for i, c := range rec.Members {
		next.apply(c, diskRef{off: off, n: int32(n), idx: int32(i)})
	}
	return next, nil
}

// normalize gives a decoded state the maps the agent writes into.
func normalize(l *localState) {
	if l.Relations == nil {
		l.Relations = map[int64]*localRelation{}
	}
	if l.AddedSubordinates == nil {
		l.AddedSubordinates = map[int64]string{}
	}
	for id, lr := range l.Relations {
		if lr == nil {
			delete(l.Relations, id)
			continue
		}
		if lr.Members == nil {
			lr.Members = map[string]int64{}
		}
	}
}

// commit records l as d says (steps.go): with a journal record, synced
// (commitSynced) or not (commitWritten), or now and then a snapshot; or
// left in memory for the next record, or a barrier, to write
// (commitLazy). A record that would hold nothing new is skipped.
//
// A record written unsynced survives a crash of the agent, and becomes
// durable with the next synced record or barrier: the agent writes a
// hook's end so, and syncs it before it acts on anything outside its
// hooks or waits, so that a machine crash loses at most a hook's end,
// which counts as a failed attempt and runs the hook again, as a crash
// while it ran would. It spares one fsync a hook, and a new journal's
// sync of its directory until the first synced record or barrier.
//
// A change left in memory is one that doing again after a crash costs
// nothing that matters: a hook the charm does not have (done again, it
// does nothing again), a charm's download (downloaded again), a scope
// entered or left (the agent enters, or leaves, again: the controller does
// nothing the second time; and an agent that starts over files it did not
// make asks the controller which scopes its unit is in, checkScopes). A
// crash of the agent before the next record loses it. A unit of a charm
// without hooks in one relation so writes no record, and no journal at
// all, on its way to running.
func (s *stateStore) commit(l *localState, d durability) error {
	switch d {
	case commitLazy:
		s.later = l
	case commitWritten:
		return s.write(l, false)
	case commitSynced:
		return s.write(l, true)
	}
	return nil
}

// sync makes durable what the barrier b says before a step acts (steps.go).
func (s *stateStore) sync(b barrier) error {
	switch b {
	case barrierSync:
		return s.syncWritten()
	case barrierSettle:
		return s.settle()
	}
	return nil
}

// syncWritten makes durable a record written unsynced, if any (with what
// was left in memory, in one synced record), and the journal's directory
// entry if the journal is new. What was left in memory alone stays left.
func (s *stateStore) syncWritten() error {
	if !s.unsynced {
		return nil
	}
	if l := s.later; l != nil {
		if err := s.write(l, true); err != nil {
			return err
		}
	}
	if !s.unsynced {
		return nil
	}
	f, err := os.OpenFile(s.path(journalName), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("sync unit state journal: %w", err)
	}
	defer f.Close()
	if err := s.syncFile(f); err != nil {
		return fmt.Errorf("sync unit state journal: %w", err)
	}
	if err := s.syncJournalEntry(); err != nil {
		return err
	}
	s.unsynced = false
	return nil
}

// defaultSettleChanges is how many members' changes may be left in memory
// alone: beyond them, settle writes them.
const defaultSettleChanges = 256

// settle is syncWritten for an agent about to wait. What was left in
// memory stays left, unless it holds more than s.settleChanges members'
// changes: that is written, unsynced (it survives the agent's crash, and a
// machine's crash costs only its doing again), so that an agent whose
// charm has no hooks does not keep every change of its relations' members
// since it started.
func (s *stateStore) settle() error {
	if s.unsynced {
		return s.syncWritten()
	}
	l := s.later
	if l == nil || len(l.changes) <= s.settleChanges {
		return nil
	}
	err := s.write(l, false)
	s.unsynced = false // nothing in it needs syncing
	return err
}

// syncJournalEntry makes the journal's directory entry durable, once.
func (s *stateStore) syncJournalEntry() error {
	if s.journalSynced {
		return nil
	}
	if err := s.syncDir(s.dir); err != nil {
		return err
	}
	s.journalSynced = true
	return nil
}

// write writes l as one journal record, synced or not, or now and then as
// a snapshot; nothing when it would record nothing new.
func (s *stateStore) write(l *localState, sync bool) error {
	head, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encode unit state: %w", err)
	}
	if !s.rewrite && len(l.changes) == 0 && bytes.Equal(head, s.head) {
		s.later = nil
		return nil
	}
	if s.rewrite || s.journalBytes > s.compactMinBytes && s.journalBytes > 2*s.snapshotBytes {
		err = s.writeSnapshot(l, head)
	} else {
		err = s.append(l, head, sync)
	}
	if err == nil {
		s.later = nil
	}
	return err
}

// append writes one record to the journal and, with sync, syncs it (and
// with it any record written unsynced before), and the journal's directory
// entry if the journal is new. On failure the journal may end in part of
// the record: the next save writes a snapshot.
func (s *stateStore) append(l *localState, head []byte, sync bool) error {
	payload, err := json.Marshal(journalRecord{Seq: s.seq + 1, State: head, Members: l.changes})
	if err != nil {
		return fmt.Errorf("encode unit state: %w", err)
	}
	line := frame(payload)
	s.rewrite = true // until the record is durable
	if err := s.makeDir(); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path(journalName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("write unit state journal: %w", err)
	}
	if _, err := f.Write(line); err != nil {
		f.Close()
		return fmt.Errorf("write unit state journal: %w", err)
	}
	if err := s.crashPoint("journal-written"); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := s.syncFile(f); err != nil {
			f.Close()
			return fmt.Errorf("sync unit state journal: %w", err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write unit state journal: %w", err)
	}
	s.unsynced = !sync
	if sync {
		if err := s.syncJournalEntry(); err != nil {
			return err
		}
	}
	s.seq++
	// The settings the record carries are read from it from now on.
	for i, c := range l.changes {
		if c.kept != nil {
			c.kept.at, c.kept.data = diskRef{off: s.journalBytes, n: int32(len(line)), idx: int32(i)}, nil
		}
	}
	s.journalBytes += int64(len(line))
	s.head, s.rewrite, l.changes = head, false, nil
	return nil
}

// writeSnapshot replaces state.json with the whole of l, then empties the
// journal. The members' kept settings are copied from where they are
// (memory, or the files being replaced), a line each.
func (s *stateStore) writeSnapshot(l *localState, head []byte) error {
	s.rewrite = true // until the journal is empty
	snap := snapshotFile{Format: stateFormat, Seq: s.seq + 1, State: head, Members: map[int64]map[string]int64{}}
	for id, lr := range l.Relations {
		if len(lr.Members) > 0 {
			snap.Members[id] = lr.Members
		}
		if lr.own != nil {
			if snap.Own == nil {
				snap.Own = map[int64]json.RawMessage{}
			}
			snap.Own[id] = lr.own
		}
	}
	first, err := json.Marshal(snap)
	if err != nil {
		return fmt.Errorf("encode unit state: %w", err)
	}
	first = append(first, '\n')
	path := s.path(snapshotName)
	tmp := path + ".tmp"
	if err := s.makeDir(); err != nil {
		return err
	}
	w, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write unit state: %w", err)
	}
	size, moved, err := s.writeSnapshotLines(w, first, l)
	if err != nil {
		w.Close()
		return err
	}
	if err := s.syncFile(w); err != nil {
		w.Close()
		return fmt.Errorf("sync unit state: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("write unit state: %w", err)
	}
	if err := s.crashPoint("snapshot-written"); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replace unit state: %w", err)
	}
	// From here on the snapshot may be the one loaded: its seq is used,
	// and the kept settings are read from it.
	s.seq = snap.Seq
	for _, m := range moved {
		m.k.at, m.k.data = m.at, nil
	}
	if err := s.syncDir(s.dir); err != nil {
		return err
	}
	if err := s.crashPoint("snapshot-renamed"); err != nil {
		return err
	}
	// The journal, if there is one (even one a failed append created),
	// is emptied; the directory was synced since it was created.
	f, err := os.OpenFile(s.path(journalName), os.O_WRONLY, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.journalSynced = false
	case err != nil:
		return fmt.Errorf("empty unit state journal: %w", err)
	default:
		if err := f.Truncate(0); err != nil {
			f.Close()
			return fmt.Errorf("empty unit state journal: %w", err)
		}
		if err := s.syncFile(f); err != nil {
			f.Close()
			return fmt.Errorf("sync unit state journal: %w", err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("empty unit state journal: %w", err)
		}
		s.journalSynced = true
	}
	s.journalBytes, s.snapshotBytes = 0, size
	s.head, s.rewrite, s.unsynced, l.changes = head, false, false, nil
	return nil
}

func (s *stateStore) syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync unit state directory: %w", err)
	}
	defer d.Close()
	if err := s.syncFile(d); err != nil {
		return fmt.Errorf("sync unit state directory: %w", err)
	}
	return nil
}
