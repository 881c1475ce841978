-- mjsched run-history retention, version 6: every tick leaves a run row and, without this,
-- nothing deletes them (100 per-second jobs add 8.6 M rows a day).
--
-- The rules. A job keeps its finished runs by two rules, each set per job
-- (scheduled_job.keep_runs_days / keep_runs_count, added in 001_schema.sql) or, where the
-- job's column is NULL, by the caller's default (the engine's keep_runs_days/keep_runs_count):
--   * keep_runs_days = D: runs that finished less than D days ago are kept;
--   * keep_runs_count = N: the N newest finished runs of the job are kept.
-- A finished run is deleted when no rule that is on keeps it; 0 turns a rule off for the job
-- (NULL defers to the default); a job with both rules off keeps everything. So D alone
-- deletes what is older than D days, N alone what is beyond the newest N, and both delete
-- what is older than D days AND beyond the newest N.
-- What is never deleted, whatever the rules: a run that is not finished (only Completed,
-- Failed, Timeout, Cancelled, Abandoned and Skipped are; Running, Queued and any status a
-- later release adds are kept); a finished run whose tick still has another run that is
-- not finished (a retry pending for it); a tick's run that is not behind its job's
-- next_run_at (its row is what stops that tick from running twice, see uq_scheduled_job_run_tick);
-- and the runs of the job's newest tick: a claim counts every tick at or before the newest
-- tick with a run as served (claim_ticks), so a next_run_at moved back over a purged tick
-- (an operator's edit) never runs that tick again.
-- "Finished" and "newest" are by completed_at (then id).
--
-- The purge (purge_runs) deletes at most p_batch_size rows per call, found through the
-- run table's index ix_scheduled_job_run_job_completed, job by job in id order (one ordered
-- range scan per job; a page of at most p_max_jobs jobs per call), and answers where the next call goes on (a cursor: job id,
-- completed_at, run id), so a purge never rescans the dead index entries its earlier
-- batches left. It takes no lock on scheduled_job rows (claims, renewals and completions
-- never wait for it), locks the run rows it deletes SKIP LOCKED, and only one session
-- purges at a time: a transaction-level advisory lock taken with pg_try_advisory_xact_lock,
-- so a second purger is answered busy = 1 at once and deletes nothing.

-- The rules, on the table (the API and check_job_fields say the same, naming the field).
ALTER TABLE mjsched.scheduled_job
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_keep_runs_days,
    DROP CONSTRAINT IF EXISTS ck_scheduled_job_keep_runs_count,
    ADD CONSTRAINT ck_scheduled_job_keep_runs_days
        CHECK (keep_runs_days IS NULL OR keep_runs_days BETWEEN 0 AND 36500),
    ADD CONSTRAINT ck_scheduled_job_keep_runs_count
        CHECK (keep_runs_count IS NULL OR keep_runs_count BETWEEN 0 AND 1000000000);

-- A job's finished runs in completion order: "older than" and "beyond the newest N" are
-- range scans of one job's entries. Only finished runs are in it (claims insert Running
-- runs, completed_at NULL, without touching it).
CREATE INDEX IF NOT EXISTS ix_scheduled_job_run_job_completed
    ON mjsched.scheduled_job_run (scheduled_job_id, completed_at, id) WHERE completed_at IS NOT NULL;

-- The jobs with a retention rule of their own, in id order: without a default rule they are
-- the only ones a purge pass visits (every engine makes one every purge_interval; reading every
-- job row cost 1.3 s a call at 1,000,000 jobs). purge_runs's page queries say "v_all_jobs OR
-- the job has a rule": a plan made for v_all_jobs = false folds that to the rule, which this
-- index answers; a plan kept for any value cannot use it and costs more, so PostgreSQL goes on
-- making plans per call for them. SQL Server: one filtered index per rule (a filter there
-- cannot hold OR), and OPTION (RECOMPILE).
CREATE INDEX IF NOT EXISTS ix_scheduled_job_keep_rule
    ON mjsched.scheduled_job (id) WHERE keep_runs_days > 0 OR keep_runs_count > 0;

-- purge_candidates: the runs of one job the rules let go, in (completed_at, id) order, at most
-- p_limit of them (NULL: all): finished before p_cut_at, before the job's N-th newest finished run
-- (p_nth_at, p_nth_id; 'infinity' when the count rule is off), after the cursor (p_after_at,
-- p_after_id), and none of the kept kinds (see the header). Internal: purge_runs calls it once
-- per job, so each call is one ordered range scan of ix_scheduled_job_run_job_completed that
-- stops after p_limit rows.
CREATE OR REPLACE FUNCTION mjsched.purge_candidates(
    p_job_id uuid, p_cut_at timestamptz, p_nth_at timestamptz, p_nth_id uuid, p_after_at timestamptz,
    p_after_id uuid, p_next_run_at timestamptz, p_limit integer)
RETURNS TABLE (run_id uuid, completed_at timestamptz)
LANGUAGE sql STABLE AS $$   -- internal (003_security.sql): runs inside purge_runs, as its owner
    SELECT x.id, x.completed_at
      FROM mjsched.scheduled_job_run x
     WHERE x.scheduled_job_id = p_job_id
       AND x.completed_at IS NOT NULL
       AND x.completed_at < p_cut_at
       AND x.completed_at <= p_nth_at AND (x.completed_at, x.id) < (p_nth_at, p_nth_id)
       AND x.completed_at >= p_after_at AND (x.completed_at, x.id) > (p_after_at, p_after_id)
       AND x.status IN ('Completed', 'Failed', 'Timeout', 'Cancelled', 'Abandoned', 'Skipped')
       AND (x.scheduled_for IS NULL
            OR ((p_next_run_at IS NULL OR x.scheduled_for < p_next_run_at)
                AND x.scheduled_for < (SELECT n.scheduled_for FROM mjsched.scheduled_job_run n
                                        WHERE n.scheduled_job_id = p_job_id AND n.scheduled_for IS NOT NULL
                                        ORDER BY n.scheduled_for DESC LIMIT 1)))
       AND NOT EXISTS (SELECT 1 FROM mjsched.scheduled_job_run p
                        WHERE p.scheduled_job_id = x.scheduled_job_id AND p.scheduled_for = x.scheduled_for
                          AND p.status NOT IN ('Completed', 'Failed', 'Timeout', 'Cancelled', 'Abandoned', 'Skipped'))
     ORDER BY x.completed_at, x.id
     LIMIT p_limit
$$;

-- purge_runs: one batch of the purge (see the header). p_keep_seconds / p_keep_count are the
-- defaults (NULL or 0: off), p_per_job lets the jobs' own columns override them (false: the
-- parameters apply to every job, as `mjsched runs prune --older-than` does), p_job_id limits
-- the purge to one job. The cursor: start with NULLs, pass back next_job_id,
-- next_completed_at and next_run_id; next_job_id NULL means the pass is done. p_dry_run
-- counts what would go in this call's page of jobs (every candidate, not one batch) and
-- deletes nothing. Returns purged (rows deleted, or counted), the cursor, and busy = 1 when
-- another session is purging (nothing was done; the cursor is handed back unchanged).
CREATE OR REPLACE FUNCTION mjsched.purge_runs(
    p_keep_seconds double precision, p_keep_count integer, p_per_job boolean DEFAULT true,
    p_job_id uuid DEFAULT NULL, p_from_job_id uuid DEFAULT NULL, p_after_completed_at timestamptz DEFAULT NULL,
    p_after_run_id uuid DEFAULT NULL, p_batch_size integer DEFAULT 1000, p_max_jobs integer DEFAULT 500,
    p_dry_run boolean DEFAULT false, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (purged integer, next_job_id uuid, next_completed_at timestamptz, next_run_id uuid, busy integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz;
    v_dry boolean := coalesce(p_dry_run, false);
    v_to uuid;
    v_left integer := p_batch_size;
    v_found integer;
    v_gone integer;
    v_purged integer := 0;
    v_cut timestamptz;
    v_nth_at timestamptz;
    v_nth_id uuid;
    v_after_at timestamptz;
    v_after_id uuid;
    v_last_at timestamptz;
    v_last_run uuid;
    v_all_jobs boolean;
    j record;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    v_now := coalesce(p_now, now());
    IF p_keep_seconds IS NOT NULL AND NOT (p_keep_seconds >= 0 AND p_keep_seconds <= 3153600000) THEN
        RAISE EXCEPTION 'keep_seconds=% must be a number of seconds in [0, 3153600000] (100 years)', p_keep_seconds
            USING ERRCODE = '22023';
    END IF;
    IF p_keep_count IS NOT NULL AND NOT (p_keep_count BETWEEN 0 AND 1000000000) THEN
        RAISE EXCEPTION 'keep_count=% must be between 0 and 1000000000', p_keep_count USING ERRCODE = '22023';
    END IF;
    IF p_batch_size IS NULL OR NOT (p_batch_size BETWEEN 1 AND 4000) THEN
        RAISE EXCEPTION 'batch_size=% must be between 1 and 4000', p_batch_size USING ERRCODE = '22023';
    END IF;
    IF p_max_jobs IS NULL OR NOT (p_max_jobs BETWEEN 1 AND 10000) THEN
        RAISE EXCEPTION 'max_jobs=% must be between 1 and 10000', p_max_jobs USING ERRCODE = '22023';
    END IF;
    IF NOT v_dry AND NOT pg_try_advisory_xact_lock(1835692146) THEN   -- 0x6D6A7072, "mjpr": one purger at a time
        RETURN QUERY SELECT 0, p_from_job_id, p_after_completed_at, p_after_run_id, 1;
        RETURN;
    END IF;
    -- Without a default rule only the jobs with a rule of their own can lose runs, and only
    -- they are paged through (an idle engine over 100,000 jobs without rules walked them all).
    v_all_jobs := (nullif(p_keep_seconds, 0) IS NOT NULL OR nullif(p_keep_count, 0) IS NOT NULL);
    IF p_job_id IS NULL THEN   -- this call's page of jobs ends at v_to (NULL: the last job)
        SELECT s.id INTO v_to FROM mjsched.scheduled_job s
         WHERE (p_from_job_id IS NULL OR s.id >= p_from_job_id)
           AND (v_all_jobs OR s.keep_runs_days > 0 OR s.keep_runs_count > 0)
         ORDER BY s.id OFFSET p_max_jobs - 1 LIMIT 1;
    END IF;
    FOR j IN
        SELECT r.id, r.next_run_at, r.keep_seconds, r.keep_count
          -- a served one-off (Expired, next_run_at NULL) keeps the runs of its run_at tick: they
          -- are what stops that tick running again if the job is made Active
          FROM (SELECT s.id, coalesce(s.next_run_at, s.run_at) AS next_run_at,
                       CASE WHEN coalesce(p_per_job, true) AND s.keep_runs_days IS NOT NULL
                            THEN nullif(s.keep_runs_days, 0) * 86400.0 ELSE nullif(p_keep_seconds, 0) END AS keep_seconds,
                       CASE WHEN coalesce(p_per_job, true) AND s.keep_runs_count IS NOT NULL
                            THEN nullif(s.keep_runs_count, 0) ELSE nullif(p_keep_count, 0) END AS keep_count
                  FROM mjsched.scheduled_job s
                 WHERE (p_job_id IS NULL OR s.id = p_job_id)
                   AND (p_from_job_id IS NULL OR s.id >= p_from_job_id)
                   AND (v_to IS NULL OR s.id <= v_to)
                   AND (v_all_jobs OR s.keep_runs_days > 0 OR s.keep_runs_count > 0)) r
         WHERE r.keep_seconds IS NOT NULL OR r.keep_count IS NOT NULL
         ORDER BY r.id
    LOOP
        v_cut := CASE WHEN j.keep_seconds IS NULL THEN 'infinity'::timestamptz
                      ELSE v_now - make_interval(secs => j.keep_seconds) END;
        v_nth_at := 'infinity';
        v_nth_id := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
        IF j.keep_count IS NOT NULL THEN   -- the job's N-th newest finished run; fewer than N: none goes
            SELECT x.completed_at, x.id INTO v_nth_at, v_nth_id
              FROM mjsched.scheduled_job_run x
             WHERE x.scheduled_job_id = j.id AND x.completed_at IS NOT NULL
             ORDER BY x.completed_at DESC, x.id DESC OFFSET j.keep_count - 1 LIMIT 1;
            CONTINUE WHEN NOT FOUND;
        END IF;
        v_after_at := '-infinity';
        v_after_id := '00000000-0000-0000-0000-000000000000';
        IF j.id = p_from_job_id AND p_after_completed_at IS NOT NULL THEN
            v_after_at := p_after_completed_at;
            v_after_id := coalesce(p_after_run_id, v_after_id);
        END IF;
        IF v_dry THEN
            SELECT count(*) INTO v_found
              FROM mjsched.purge_candidates(j.id, v_cut, v_nth_at, v_nth_id, v_after_at, v_after_id, j.next_run_at, NULL);
            v_purged := v_purged + v_found;
            CONTINUE;
        END IF;
        WITH candidates AS MATERIALIZED (
            SELECT c.run_id, c.completed_at
              FROM mjsched.purge_candidates(j.id, v_cut, v_nth_at, v_nth_id, v_after_at, v_after_id, j.next_run_at,
                                            v_left) c
        ), locked AS (
            SELECT x.id
              FROM mjsched.scheduled_job_run x
             WHERE x.id IN (SELECT c.run_id FROM candidates c)
               AND x.status IN ('Completed', 'Failed', 'Timeout', 'Cancelled', 'Abandoned', 'Skipped')
               FOR UPDATE OF x SKIP LOCKED
        ), gone AS (
            DELETE FROM mjsched.scheduled_job_run r USING locked l WHERE r.id = l.id RETURNING r.id
        ), last AS (
            SELECT c.completed_at, c.run_id FROM candidates c ORDER BY c.completed_at DESC, c.run_id DESC LIMIT 1
        )
        SELECT (SELECT count(*) FROM candidates), (SELECT count(*) FROM gone),
               (SELECT last.completed_at FROM last), (SELECT last.run_id FROM last)
          INTO v_found, v_gone, v_last_at, v_last_run;
        v_purged := v_purged + v_gone;
        v_left := v_left - v_found;
        IF v_left <= 0 THEN   -- the batch is full: more may be left in this job
            RETURN QUERY SELECT v_purged, j.id, v_last_at, v_last_run, 0;
            RETURN;
        END IF;
    END LOOP;
    IF p_job_id IS NULL AND v_to IS NOT NULL THEN   -- the next page of jobs
        RETURN QUERY SELECT v_purged, (SELECT s.id FROM mjsched.scheduled_job s
                                        WHERE s.id > v_to AND (v_all_jobs OR s.keep_runs_days > 0 OR s.keep_runs_count > 0)
                                        ORDER BY s.id LIMIT 1),
                            NULL::timestamptz, NULL::uuid, 0;
    ELSE                                             -- the pass is done
        RETURN QUERY SELECT v_purged, NULL::uuid, NULL::timestamptz, NULL::uuid, 0;
    END IF;
END;
$$;

REVOKE ALL ON FUNCTION mjsched.purge_candidates(uuid, timestamptz, timestamptz, uuid, timestamptz, uuid, timestamptz,
                                                 integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.purge_runs(double precision, integer, boolean, uuid, uuid, timestamptz, uuid,
                                           integer, integer, boolean, timestamptz) FROM PUBLIC;
