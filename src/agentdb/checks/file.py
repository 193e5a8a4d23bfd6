"""Check one session file: pure, read-only, no printing.

Order matters for safety: the liveness probe and the WAL scan run *before* SQLite opens the
file in this process (a process never sees its own POSIX locks, and closing a descriptor drops
them), and the connection is closed before anything else opens the file again.

Size: over 500 lines because it is one file's check, whose steps run in an order that matters
for safety (liveness and WAL before SQLite opens the file).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

from agentdb import db, errors, fsutil, locks
from agentdb.checks import policy
from agentdb.checks.codes import finding, verdict_of
from agentdb.checks.journal import check_with_journal, read_header
from agentdb.checks.parent import parent_depth
from agentdb.hashing import genesis, mismatch_sql
from agentdb.paths import SESSION_SUFFIX, is_valid_id, sidecar
from agentdb.results import Finding, SessionCheck, Verified
from agentdb.schema import enums
from agentdb.schema.identity import (
    SchemaRows,
    columns_missing,
    identify,
    schema_rows,
    table_differences,
)
from agentdb.schema.revisions import APPLICATION_ID, CURRENT_REVISION
from agentdb.schema.text import invalid_text, text_encoding

_WAL_CODES = {"wal_bad_header", "wal_checksum_break", "wal_frames_after_break", "wal_torn_tail"}
_WAL_CODES |= {"wal_stale_frames"}


# The session_meta row's columns a check judges (capped text, its count), before its FROM.
META_SQL = (
    "SELECT substr(session_id, 1, 64), substr(parent_session_id, 1, 64), "
    "substr(status, 1, 64), depth, typeof(depth), ended_at IS NULL, "
    "(SELECT count(*) FROM session_meta)"
)


def _name(obj: tuple[str, str]) -> str:
    return obj[1]


class _Stop(Exception):
    """Reading the file failed; the findings so far stand and the rest is skipped."""


def _key(st: os.stat_result | None) -> tuple[int, int, int] | None:
    return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)


def _stat_key(path: Path | str) -> tuple[int, int, int] | None:
    try:
        return _key(os.lstat(path))
    except FileNotFoundError:
        return None


def _snapshot(stats: db.FileStats) -> tuple[object, ...]:
    return (_key(stats.db), _key(stats.wal), _key(stats.shm))


@dataclass
class _Run:
    path: Path
    session_id: str
    quick: bool
    recovered: bool  # the recovery log has a "recovered" outcome for this session
    findings: list[Finding] = field(default_factory=list)
    status: str | None = None
    revision: int | None = None
    size: int | None = None
    live: int | None = None
    unstable: bool = False
    parent: str | None = None  # session_meta.parent_session_id, when it is another's valid id
    depth: int | None = None  # session_meta.depth, when it is an integer
    meta_rows: int = 0  # session_meta rows counted
    named: str | None = None  # session_meta's id when it is another session's valid id
    verified: Verified | None = None  # revision 3: what the chain walk proved

    @property
    def fix_recover(self) -> str:
        return f"agentdb recover {self.session_id}"

    def add(self, code: str, message: str, fix: str | None = None) -> None:
        self.findings.append(finding(code, f"{self.path.name}: {message}", fix))

    def result(self) -> SessionCheck:
        out = SessionCheck(
            self.session_id,
            self.path,
            verdict_of(self.findings),
            self.status,
            self.revision,
            self.size,
            self.live,
            self.findings,
            self.verified,
        )
        out.fix = policy.fix_for(out)
        return out

    # ------------------------------------------------------------------ steps

    def entry(self, stats: db.FileStats) -> bool:
        """The entry is a regular file owned by us and not writable by others."""
        st = stats.db
        if st is None:
            self.add("missing", "no such session file; see `agentdb sessions list`")
            return False
        if stat.S_ISLNK(st.st_mode):
            self.add(
                "symlink",
                "is a symbolic link, never followed; replace it with the session file itself",
            )
            return False
        if not stat.S_ISREG(st.st_mode):
            self.add("not_regular", "is not a regular file; move it out of the sessions directory")
            return False
        self.size = st.st_size
        if stats.wal is not None:
            self.size += stats.wal.st_size
        problems = db.security_problems(self.path, stats)
        for code, problem in problems:
            self.add(code, problem.detail, policy.command_in(problem.fix))
        if problems:
            self.add("not_opened", "not opened until its permissions are fixed")
            return False
        self.warn_readable(stats)
        for suffix, linked in (("", st), ("-wal", stats.wal)):
            if linked is None or not stat.S_ISREG(linked.st_mode) or linked.st_nlink <= 1:
                continue
            p = sidecar(self.path, suffix) if suffix else self.path
            fix = fsutil.break_link_command(p)
            self.add(
                "hard_linked",
                f"{p.name}: has {linked.st_nlink} names (hard links, e.g. from `cp -al` or "
                "`rsync --link-dest`); the other names are not a backup: every write to the "
                "session changes them too (and a writer opened through one writes this "
                "session), a job that rewrites it in place would change them all; while no "
                f"kernel has it open, break the link: `{fix}`, and make copies with "
                "`agentdb backup`",
                fix,
            )
        return True

    def warn_readable(self, stats: db.FileStats) -> None:
        """The database or a sidecar that group or others can read (not write: that is
        ``insecure_mode``): a session's history is private to its user."""
        for suffix, st in (("", stats.db), ("-wal", stats.wal), ("-shm", stats.shm)):
            if st is None or not stat.S_ISREG(st.st_mode):
                continue
            mode = stat.S_IMODE(st.st_mode)
            if mode & 0o044:
                p = sidecar(self.path, suffix) if suffix else self.path
                fix = f"chmod 600 {p}"
                self.add(
                    "readable_by_others",
                    f"{p.name}: mode {mode:04o} lets group or others read the session; run `{fix}`",
                    fix,
                )

    def probe(self) -> None:
        holder = locks.probe(self.path)
        if holder is not None:
            self.live = holder.pid or 0
            who = f"pid {holder.pid}" if holder.pid else "another process"
            self.add("live", f"open by {who} right now")

    def wal(self, stats: db.FileStats) -> tuple[object, ...] | None:
        """Judge the WAL of a session nobody has open. Returns the WAL's stat key (from
        ``stats``, the check's stat pass: a WAL that changes after it shows in the
        comparison at the end)."""
        if self.live is not None:
            if stats.wal is not None:
                self.add("wal_not_judged", "open right now, so its WAL is not judged")
            return None
        key = _key(stats.wal)
        if key is None:
            return None
        # the format readers are loaded only for a file that has a WAL (start-up of `check ID`)
        from agentdb.fileformat import foreign_evidence, scan_wal

        wal = sidecar(self.path, "-wal")
        try:
            data = fsutil.read_regular(wal)  # no symlink, no FIFO; its size when opened
        except OSError as e:
            self.add("wal_unreadable", f"cannot read its WAL ({e.strerror})")
            return key
        except errors.NotRegularFile as e:
            self.add("wal_unreadable", f"cannot read its WAL ({e.detail})")
            return key
        scan = scan_wal(data)
        for a in scan.anomalies:
            if a.code not in _WAL_CODES:
                continue
            fix = self.fix_recover if a.severity == "error" else None
            suffix = f"; run `{fix}`" if fix else ""
            self.add(a.code, f"WAL: {a.message}{suffix}", fix)
        from agentdb.checks.walevidence import events_rewritten

        foreign = foreign_evidence(read_header(self.path), scan, (APPLICATION_ID,))
        if foreign is None:
            # Recover's evidence too (one verdict for both): another session's WAL may apply
            # cleanly over this file, and SQLite then reads its events as this session's.
            try:
                foreign = events_rewritten(scan, self.path)
            except OSError:
                foreign = None  # the file went away or is unreadable: judged by its open
            if foreign is not None and self.through_wal(stats, db.chain_whole):
                foreign = None  # the file alone holds another session's page, not the WAL
        if foreign is None and scan.valid_frames:
            foreign = self.wal_behind(stats)
        if foreign is not None:
            self.foreign_wal(foreign)
        return key

    def through_wal(self, stats: db.FileStats, judge: Any) -> Any:
        """``judge(connection, session_id)`` on the state read through the WAL (None when it
        does not open)."""
        try:
            through = db.open_readonly(self.path, check_schema=False, stats=stats, judged=True)
        except errors.AgentdbError:
            return None
        try:
            return judge(through, self.session_id)
        finally:
            through.close()

    def wal_behind(self, stats: db.FileStats) -> str | None:
        """Recover's evidence too (:func:`agentdb.db.wal_behind`): read through the WAL, the
        file loses events it holds alone — an earlier generation's WAL, which the next open
        would checkpoint over the newer pages. Nobody has the file open (judged by the caller)."""
        try:
            alone = db.open_readonly_alone(self.path)
        except errors.AgentdbError:
            return None
        try:
            mine = db.event_ids(alone)
        finally:
            alone.close()
        if not mine:
            return None
        try:
            through = db.open_readonly(self.path, check_schema=False, stats=stats, judged=True)
        except errors.AgentdbError:
            return None
        try:
            return db.wal_behind(db.event_ids(through), mine)
        finally:
            through.close()

    def foreign_wal(self, why: str) -> None:
        self.add(
            "foreign_wal",
            f"its WAL belongs to another database ({why}); run `{self.fix_recover}` (it "
            "salvages the session from the file alone and keeps the WAL with the original)",
            self.fix_recover,
        )

    def meta_of_file_alone(self) -> None:
        """session_meta names another session: if the file alone (its WAL ignored) names this
        one, the WAL is another session's (foreign_wal), not the file."""
        if not any(f.code == "meta_id_mismatch" for f in self.findings):
            return
        if self.live is not None or not sidecar(self.path, "-wal").exists():
            return
        try:
            conn = db.open_readonly_alone(self.path)
        except errors.AgentdbError:
            return
        try:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT CAST(session_id AS BLOB) FROM session_meta NOT INDEXED"
                )
            ]
        except db.READ_ERRORS:
            return
        finally:
            conn.close()
        if ids == [self.session_id.encode()]:
            self.findings = [f for f in self.findings if f.code != "meta_id_mismatch"]
            self.foreign_wal(
                "applied, it gives a session_meta row naming another session; the file alone "
                "names this one"
            )

    def open(self, stats: db.FileStats, *, alone: bool = False) -> db.ReadConnection | None:
        try:
            if alone:
                conn = db.open_readonly_alone(self.path)
            else:
                conn = db.open_readonly(self.path, check_schema=False, stats=stats, judged=True)
        except errors.AgentdbError as e:
            msg = e.detail
            if isinstance(e, errors.Corrupt):
                self.add("read_error", msg, self.fix_recover)
            elif isinstance(e, errors.InsecureFile):
                self.add("insecure_mode", msg)
            elif isinstance(e, errors.NotRegularFile):
                self.add("not_regular", msg)
            elif isinstance(e, errors.SessionNotFound):
                self.add("missing", msg)
            else:
                self.add("unreadable", msg)
            return None
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        return conn

    def read_failed(self, e: BaseException) -> _Stop:
        err = db.translate(e, self.path)
        msg = err.detail
        if isinstance(err, errors.Corrupt) or isinstance(e, apsw.IOError):
            # A file that opened but whose rows do not read (a page lost past the end of a
            # truncated file gives "disk I/O error") is damaged, not merely unreadable.
            if not any(f.code == "integrity" for f in self.findings):
                self.add(
                    "read_error",
                    f"SQLite: {str(e).splitlines()[0]}; run `{self.fix_recover}`",
                    self.fix_recover,
                )
        elif isinstance(e, apsw.NotADBError):
            self.add("not_a_database", msg)
        else:
            self.add("unreadable", msg)
        return _Stop()

    def identity(self, conn: apsw.Connection, rows: SchemaRows) -> bool:
        unsafe = sorted(((t, n) for t, n, _, _ in rows if t in ("trigger", "view")), key=_name)
        if unsafe:
            listed = ", ".join(f"{t} {n!r}" for t, n in unsafe[:3])
            more = f" and {len(unsafe) - 3} more" if len(unsafe) > 3 else ""
            self.add(
                "unsafe_schema",
                f"has {listed}{more}; the kernel never creates these — inspect the file by hand, "
                "agentdb will not run its SQL",
            )
        ident = identify(conn, rows=rows)
        self.revision = ident.user_version
        if ident.kind == "empty":
            self.add("empty_database", "an empty database with no session in it")
            return False
        if ident.kind in ("foreign", "too_new"):
            fix = "upgrade agentdb" if ident.kind == "too_new" else "move it out of the directory"
            self.add(ident.kind, f"{ident.problem}; {fix}")
            return False
        if ident.application_id == 0:
            self.add("application_id_zero", "application_id 0: written by another writer")
        if ident.user_version < CURRENT_REVISION:
            fix = f"agentdb migrate {self.session_id}"
            self.add(
                "needs_migration",
                f"schema revision {ident.user_version}, current is {CURRENT_REVISION}; run `{fix}`",
                fix,
            )
        return True

    def integrity(self, conn: apsw.Connection) -> None:
        what = "quick_check" if self.quick else "integrity_check"
        try:
            problems = db.integrity_problems(conn, quick=self.quick)
        except apsw.CorruptError as e:
            problems = [f"stopped: {str(e).splitlines()[0]}"]
        if problems:
            more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
            self.add(
                "integrity",
                f"{what}: {problems[0][:200]}{more}; run `{self.fix_recover}`",
                self.fix_recover,
            )

    def schema(self, conn: apsw.Connection, revision: int, rows: SchemaRows) -> bool:
        diffs = table_differences(conn, revision, rows=rows)
        if diffs:
            gaps = columns_missing(conn, revision)
            if gaps:
                self.add(
                    "schema_columns_missing",
                    f"the schema lacks what revision {revision} names: {'; '.join(gaps[:3])}"
                    + (f" (+{len(gaps) - 3} more)" if len(gaps) > 3 else "")
                    + f": the rows cannot be read as the session's; run `{self.fix_recover}`",
                    self.fix_recover,
                )
            self.add(
                "schema_mismatch",
                f"schema differs from revision {revision}: {'; '.join(diffs[:3])}"
                + (f" (+{len(diffs) - 3} more)" if len(diffs) > 3 else ""),
            )
            return False
        return True

    def text(self, conn: apsw.Connection, revision: int) -> bool:
        """TEXT that is not valid UTF-8 (read as bytes, never decoded). ``events`` is scanned
        by a full check of a revision-1 file (from revision 2 its content hash covers it, as
        bytes); the small tables always. False when session_meta itself is affected."""
        encoding = text_encoding(conn)
        if encoding is not None:
            self.add("text_encoding", f"{encoding}; run `{self.fix_recover}`", self.fix_recover)
            return False
        skip = ("events",) if self.quick or revision >= 2 else ()
        bad = invalid_text(conn, skip=skip)
        for table, n in bad.items():
            self.add(
                "invalid_text",
                f"{n} {table} rows hold TEXT that is not valid UTF-8; run `{self.fix_recover}`",
                self.fix_recover,
            )
        return "session_meta" not in bad

    def session_meta(self, conn: apsw.Connection) -> None:
        rows = conn.execute(META_SQL + " FROM session_meta LIMIT 1").fetchall()
        if not rows:
            self.add("meta_missing", "no session_meta row", self.fix_recover)
            return
        self.judge_meta(tuple(rows[0]))
        if self.named is not None and chain_names(conn, self.session_id):
            # The events' chain starts at this session's genesis (the file name's id): the
            # row is damage (a page of another session's file), not the file's identity.
            self.findings = [f for f in self.findings if f.code != "meta_id_mismatch"]
            self.add(
                "meta_hash_mismatch",
                f"session_meta names session {self.named}, but the event chain starts at this "
                "session's genesis: a page of another session's file over this one's; run "
                f"`{self.fix_recover}`",
                self.fix_recover,
            )
            self.named = None

    def judge_meta(self, row: tuple[Any, ...]) -> None:
        """The findings of the ``session_meta`` row (:data:`META_SQL`'s first columns)."""
        sid, parent, status, depth, depth_type, no_end, count = row[:7]
        self.meta_rows = int(count)
        if int(count) > 1:
            self.add("meta_multiple", f"{count} session_meta rows, expected exactly one")
        if sid != self.session_id and isinstance(sid, str) and is_valid_id(sid):
            self.named = sid
            self.add(
                "meta_id_mismatch",
                f"session_meta names session {sid}, not the file name's id: another session's "
                f"file under this name (copied or renamed); move it back to {sid}{SESSION_SUFFIX} "
                "by hand",
            )
        elif sid != self.session_id:
            self.add("meta_id_invalid", f"session_meta.session_id is {sid!r}, not a session id")
        self.status = status if isinstance(status, str) else None
        if status not in enums.STATUSES:
            self.add("bad_status", f"status {status!r} is not one of the spec's seven")
        elif (status == enums.RUNNING) != bool(no_end):
            self.add(
                "ended_at_inconsistent",
                f"status {status} with ended_at {'unset' if no_end else 'set'}",
            )
        if parent is not None and (
            not isinstance(parent, str) or not is_valid_id(parent) or parent == self.session_id
        ):
            self.add("bad_parent_id", f"parent_session_id {parent!r} is not another session's id")
        elif parent is not None:
            self.parent = parent
        if depth_type != "integer" or int(depth) < 0:
            self.add("bad_depth", f"depth {depth!r} is not a non-negative integer")
        else:
            self.depth = int(depth)

    def parent_depth(self) -> None:
        """A child's depth is its parent's + 1 (the writer refuses anything else); another
        writer may count differently, so this is a warning. Needs the parent's file."""
        if self.parent is None or self.depth is None:
            return
        want = parent_depth(self.path.with_name(self.parent + SESSION_SUFFIX), self.parent)
        if want is not None and self.depth != want + 1:
            self.add(
                "depth_mismatch",
                f"depth {self.depth}, but its parent {self.parent} has depth {want} (expected "
                f"{want + 1}); written by another writer that counts depth differently",
            )

    def consistency(self, conn: apsw.Connection) -> None:
        kinds, cats, decisions = (
            enums.sql_in(enums.KINDS),
            enums.sql_in(enums.PRODUCER_CATEGORIES),
            enums.sql_in(enums.DECISIONS),
        )
        counts = conn.execute(
            f"SELECT (SELECT count(*) FROM events WHERE kind NOT IN ({kinds})), "
            f"(SELECT count(*) FROM events WHERE producer_category NOT IN ({cats})) + "
            f"(SELECT count(*) FROM producers WHERE category NOT IN ({cats})), "
            f"(SELECT count(*) FROM plan_items WHERE decision NOT IN ({decisions})), "
            "(SELECT count(*) FROM cost_ledger c JOIN events e ON e.sequence = c.event_sequence "
            " WHERE e.kind IS NOT 'message'), "
            "(SELECT count(*) FROM plan_items p JOIN events e ON e.sequence = p.event_sequence "
            " WHERE e.kind IS NOT 'plan'), "
            "(SELECT count(*) FROM producers p JOIN events e ON e.sequence = p.first_seen_sequence"
            " WHERE e.producer_category IS NOT p.category OR e.producer_name IS NOT p.name"
            " OR e.producer_version IS NOT p.version), "
            "(SELECT count(*) FROM (SELECT DISTINCT producer_category AS c, producer_name AS n, "
            " producer_version AS v FROM events) d WHERE NOT EXISTS (SELECT 1 FROM producers p"
            " WHERE p.category = d.c AND p.name = d.n AND p.version = d.v)), "
            f"(SELECT count(*) FROM events WHERE kind IN ('plan', 'apply')"
            f" AND producer_category IS NOT '{enums.KERNEL}'), "
            f"(SELECT count(*) FROM events WHERE producer_category = '{enums.KERNEL}'"
            " AND kind NOT IN ('plan', 'apply')), "
            "(SELECT count(*) FROM events WHERE kind = 'message' AND sequence NOT IN"
            " (SELECT event_sequence FROM cost_ledger WHERE event_sequence IS NOT NULL))"
        ).fetchone()
        assert counts is not None
        bad_kind, bad_cat, bad_dec, ledger, plan, prod, unlisted, not_kernel, by_kernel, free = (
            int(x) for x in counts
        )
        if bad_kind:
            self.add("bad_kind", f"{bad_kind} events have a kind outside the spec's ten")
        if bad_cat:
            self.add("bad_producer_category", f"{bad_cat} rows have an unknown producer category")
        if bad_dec:
            self.add("bad_decision", f"{bad_dec} plan_items have a decision not allow/ask/deny")
        if ledger:
            self.add("ledger_not_message", f"{ledger} cost_ledger rows point at non-message events")
        if plan:
            self.add("plan_item_not_plan", f"{plan} plan_items rows point at non-plan events")
        if prod:
            self.add(
                "producer_mismatch",
                f"{prod} producers rows name a first-seen event written by another producer",
            )
        if unlisted:
            self.add("producer_unlisted", f"{unlisted} producers wrote events but are not listed")
        # What agentdb's writer refuses to write; another writer's file may hold it.
        if not_kernel or by_kernel:
            self.add(
                "kernel_kind_mismatch",
                f"{not_kernel} plan/apply events not written by the kernel producer, "
                f"{by_kernel} other events written by it (the spec reserves the kernel "
                "producer for plan and apply); written by another writer",
            )
        if free:
            self.add(
                "message_without_cost",
                f"{free} message events have no cost_ledger row (the spec extracts every "
                "message's usage into cost_ledger); costs of this session are understated",
            )

    def foreign_keys(self, conn: apsw.Connection, schema: str = "main") -> None:
        """``schema``: where the file is (the shared reader's attached schema: the pragma
        with no name checks the empty main database only)."""
        missing: dict[str, list[int]] = {}
        for table, rowid, _parent, _fkid in conn.execute(f"PRAGMA {schema}.foreign_key_check"):
            missing.setdefault(str(table), []).append(int(rowid) if rowid is not None else -1)
        for table, rowids in sorted(missing.items()):
            text = (
                f"{len(rowids)} {table} rows point at events that do not exist "
                f"(first rowid {min(rowids)})"
            )
            if self.recovered:
                self.add(
                    "orphan_of_recovery",
                    f"{text}: expected after an earlier recovery lost those events",
                )
            else:
                self.add("missing_event", f"{text}; run `{self.fix_recover}`", self.fix_recover)

    def hashes(self, conn: apsw.Connection) -> None:
        bad = [int(r[0]) for r in conn.execute(mismatch_sql("sequence") + " ORDER BY sequence")]
        if bad:
            shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
            self.add(
                "content_hash_mismatch",
                f"{len(bad)} events do not match their content hash (sequence {shown}); "
                f"run `{self.fix_recover}`",
                self.fix_recover,
            )

    def rows(self, conn: apsw.Connection, revision: int, schema: str = "main") -> None:
        """What the rows say, inside the caller's read transaction: a full check's
        cross-table references, consistency and content hashes; from revision 3 the chain walk
        (``--quick`` too: its O(1) part), which also judges rows bound to no event."""
        if not self.quick:  # --quick: no cross-table references, no payload hashes
            if revision < 3:
                self.foreign_keys(conn, schema)
            self.consistency(conn)
            if revision == 2:
                self.hashes(conn)
        if revision >= 3:
            self.chain(conn)

    def chain(self, conn: apsw.Connection) -> None:
        """Revision 3: the chain walk (full, or ``--quick``'s O(1) part) and its findings."""
        from agentdb.checks import chainproof

        # the chain starts from the genesis of the session the file is (another session's file
        # under this name is misplaced, not damaged: meta_id_mismatch says so, not the chain)
        proof = chainproof.verify(conn, self.named or self.session_id, quick=self.quick)
        r = proof.report
        by_sql = not self.quick
        if by_sql and r.rows.get("events", 0) != r.proven.get("events", 0):
            self.hashes(conn)  # revision 2's query and wording for events whose hash fails
        for code, message, fix in chainproof.findings(proof, self.session_id, events_by_sql=by_sql):
            self.add(code, message, fix)
        self.verified = chainproof.verified_of(proof, meta_rows=self.meta_rows)

    def tables(self, conn: apsw.Connection, *, immutable: bool) -> None:
        """Everything that reads the file through SQLite, inside one read transaction."""
        try:
            if not immutable:  # one snapshot of a WAL database for every query below
                conn.execute("BEGIN")
            try:
                rows = schema_rows(conn)
                if not self.identity(conn, rows):
                    return
                revision = int(self.revision or 0)
                self.integrity(conn)
                if not self.schema(conn, revision, rows):
                    return
                if not self.text(conn, revision):
                    return
                self.session_meta(conn)
                self.rows(conn, revision)
            finally:
                if not conn.get_autocommit():
                    conn.execute("COMMIT")
        except db.READ_ERRORS as e:
            raise self.read_failed(e) from e


def _check_once(
    path: Path, session_id: str, *, quick: bool, recovered: bool, stats: db.FileStats | None
) -> _Run:
    run = _Run(path, session_id, quick, recovered)
    # One stat pass: what the entry is judged by, what open_readonly judges, and the "before"
    # of the snapshot. A writer that starts after it shows in the before/after comparison.
    if stats is None:
        stats = db.file_stats(path)
    if not run.entry(stats):
        return run
    run.probe()
    wal_key = run.wal(stats)
    before = _snapshot(stats)
    alone = any(f.code == "foreign_wal" for f in run.findings)
    # another database's WAL: the session file is judged by itself, as recover will
    conn = run.open(stats, alone=alone)
    # Read without SQLite's locks (immutable, or a private copy of a WAL whose writer is gone):
    # a writer that started meanwhile shows in the before/after comparison below.
    unlocked = stats.wal is None if conn is None else conn.how != "wal"
    if conn is not None:
        try:
            run.tables(conn, immutable=conn.how == "immutable")
        except _Stop:
            pass
        finally:
            conn.close()
        if not quick:  # the parent's file is opened only after this one is closed
            run.parent_depth()
    if not alone:
        run.meta_of_file_alone()
    if unlocked and _snapshot(db.file_stats(path, journal=False)) != before:
        run.unstable = True  # a writer started while we read the file without locks
    if run.live is None:
        holder = locks.probe(path)
        moved = wal_key is not None and _stat_key(os.fspath(path) + "-wal") != wal_key
        if holder is not None or moved:
            # Someone opened it meanwhile: what we read of its WAL may be mid-write.
            run.findings = [f for f in run.findings if f.code not in _WAL_CODES]
            run.add("wal_not_judged", "opened by another process during the check")
            if holder is not None:
                run.live = holder.pid or 0
        elif run.status == enums.RUNNING:
            fix = f"agentdb sessions end {session_id}"
            run.add(
                "interrupted",
                "status is running but no process has it open: the kernel stopped without "
                f"ending it; resume it, or end it with `{fix}` (cancelled: it can still be "
                "resumed)",
                fix,
            )
    return run


def check_path(
    path: Path,
    session_id: str,
    *,
    quick: bool = False,
    recovered: bool = False,
    stats: db.FileStats | None = None,
) -> SessionCheck:
    """Check the session file at ``path`` (named ``session_id``) and return what was found.

    ``recovered`` says the recovery log records a salvage of this session: rows whose event is
    missing are then expected (``orphan_of_recovery``) rather than inconsistent. Never writes;
    a file that changed while it was read, or a live file that looked damaged, is checked once
    more and the second result stands. ``stats``: a :func:`db.file_stats` of ``path`` taken
    just now by the caller (the identity it records with the verdict), used as the check's own.
    """
    if stats is None or stats.journal is not None:
        with_journal = check_with_journal(
            path, lambda p: _check_path(p, session_id, quick=quick, recovered=recovered)
        )
        if with_journal is not None:
            return with_journal
    return _check_path(path, session_id, quick=quick, recovered=recovered, stats=stats)


def _check_path(
    path: Path,
    session_id: str,
    *,
    quick: bool,
    recovered: bool,
    stats: db.FileStats | None = None,
) -> SessionCheck:
    run = _check_once(path, session_id, quick=quick, recovered=recovered, stats=stats)
    result = run.result()
    serious = result.verdict in ("corrupt", "unreadable")
    if run.unstable or (run.live is not None and serious):
        why = "changed while it was read" if run.unstable else "is live and looked damaged"
        run = _check_once(path, session_id, quick=quick, recovered=recovered, stats=None)
        run.add("unstable", f"{why}; checked a second time, and this is the second result")
        result = run.result()
    return result


def chain_names(conn: apsw.Connection, session_id: str) -> bool:
    """The events' chain (revision 3) starts at ``session_id``'s genesis: the first event's
    stored ``prev_hash`` is the hash of that id. The chain binds every event to its session,
    so this outweighs a ``session_meta`` row naming another (a page of another session's
    file); a file another session's really is has that session's genesis there."""
    try:
        row = conn.execute(
            "SELECT prev_hash FROM events NOT INDEXED ORDER BY sequence LIMIT 1"
        ).fetchone()
    except db.READ_ERRORS:
        return False  # no chain columns (revision 1 or 2), or the table does not read
    return row is not None and row[0] == genesis(session_id)
