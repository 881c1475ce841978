-- mjsched tags, version 10: a job carries a set of tags; a whole tag can be paused (with who,
-- why and, optionally, until when) and resumed in one call (README "Tags").
--
-- * job_tag: one row per (job, tag), written by insert_job and update_job (004_job_admin.sql,
--   field "tags": the job's whole set). A table rather than a column: a tag's jobs are one
--   index range (ix_job_tag_tag), for a pause, a list filter and the claim's per-tag count,
--   and SQL Server 2016 reads it without STRING_SPLIT or STRING_AGG.
-- * A tag: 1 to 64 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit
--   (tag_problem; lower case only, so both dialects compare tags alike whatever the collation).
--   At most 32 tags a job.
-- * job_pause: why a Paused job is paused, when a pause_jobs call paused it: the database login
--   (session_user), the application's user if it gave one, the reason, and paused_until.
--   A pause with paused_until is a maintenance window: the first claim at or after that
--   instant (any engine's) sets the job Active again (resume_paused_jobs, under the job's row
--   lock). Any status written through update_job (pause_job, resume_job) ends the record.
-- Safe to re-run.

CREATE TABLE IF NOT EXISTS mjsched.job_tag (
    scheduled_job_id uuid NOT NULL REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
    tag              varchar(64) NOT NULL,
    CONSTRAINT pk_job_tag PRIMARY KEY (scheduled_job_id, tag),
    CONSTRAINT ck_job_tag_tag CHECK (tag ~ '^[a-z0-9][a-z0-9._-]{0,63}$')
);
CREATE INDEX IF NOT EXISTS ix_job_tag_tag ON mjsched.job_tag (tag, scheduled_job_id);

CREATE TABLE IF NOT EXISTS mjsched.job_pause (
    scheduled_job_id uuid NOT NULL REFERENCES mjsched.scheduled_job (id) ON DELETE CASCADE,
    paused_at        timestamptz NOT NULL,
    paused_by        varchar(255) NOT NULL,     -- the database login
    paused_by_user   varchar(255),              -- the application's user, when the caller named one
    pause_reason     varchar(1000),
    paused_until     timestamptz,               -- NULL: until resumed
    tag              varchar(64) NOT NULL,      -- the tag the pause was for
    CONSTRAINT pk_job_pause PRIMARY KEY (scheduled_job_id),
    CONSTRAINT ck_job_pause_paused_until
        CHECK (paused_until IS NULL OR paused_until BETWEEN '1900-01-01 00:00:00+00' AND '9999-12-31 00:00:00+00')
);
-- The windows that end, for the claim's resume and next_due_at (an index head each).
CREATE INDEX IF NOT EXISTS ix_job_pause_until ON mjsched.job_pause (paused_until) WHERE paused_until IS NOT NULL;

-- tag_problem: why a value is not a tag (NULL when it is one). The one statement of the rule;
-- ck_job_tag_tag spells the same rule for the table.
CREATE OR REPLACE FUNCTION mjsched.tag_problem(p_tag varchar) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_tag IS NULL OR p_tag = '' THEN 'must not be empty'
                WHEN length(p_tag) > 64 THEN format('%s characters long; at most 64 allowed', length(p_tag))
                WHEN p_tag !~ '^[a-z0-9][a-z0-9._-]*$'
                THEN 'may hold only a-z, 0-9, ".", "_" and "-", and starts with a letter or a digit'
           END
$$;

-- check_tag: the tag a procedure was given, or an error naming the parameter (SQLSTATE 22023).
CREATE OR REPLACE FUNCTION mjsched.check_tag(p_tag varchar) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF mjsched.tag_problem(p_tag) IS NOT NULL THEN
        RAISE EXCEPTION 'tag=%: %', coalesce(quote_literal(left(p_tag, 200)), 'null'), mjsched.tag_problem(p_tag)
            USING ERRCODE = '22023';
    END IF;
END;
$$;

-- pause_jobs: every Active job carrying p_tag becomes Paused, in one transaction, with a
-- job_pause record (who: session_user and p_user; why: p_reason; p_until: when the claims
-- resume it, NULL for never). Jobs already Paused, Disabled, Pending or Expired are left as
-- they are (an earlier pause keeps its own record). A run in progress finishes. Job rows are
-- locked in id order, waiting (an administrative call). Returns how many jobs were paused; a
-- replay finds them Paused and answers 0.
CREATE OR REPLACE FUNCTION mjsched.pause_jobs(
    p_tag varchar, p_reason varchar DEFAULT NULL, p_until timestamptz DEFAULT NULL,
    p_user varchar DEFAULT NULL, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (paused integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_now timestamptz := coalesce(p_now, now());
    v_ids uuid[];
    v_rows integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_tag(p_tag);
    IF length(p_reason) > 1000 THEN
        RAISE EXCEPTION 'reason: % characters long; at most 1000 allowed', length(p_reason) USING ERRCODE = '22023';
    END IF;
    IF length(p_user) > 255 THEN
        RAISE EXCEPTION 'user: % characters long; at most 255 allowed', length(p_user) USING ERRCODE = '22023';
    END IF;
    IF p_until IS NOT NULL AND NOT (p_until > v_now AND p_until <= '9999-12-31 00:00:00+00') THEN
        RAISE EXCEPTION 'until=%: must be later than now (the database clock reads %) and before 9999-12-31',
            p_until, v_now USING ERRCODE = '22023';
    END IF;
    v_ids := ARRAY(SELECT j.id FROM mjsched.scheduled_job j
                    WHERE j.status = 'Active'
                      AND j.id IN (SELECT g.scheduled_job_id FROM mjsched.job_tag g WHERE g.tag = p_tag)
                    ORDER BY j.id
                      FOR NO KEY UPDATE);
    PERFORM mjsched.test_pause('pause_jobs:jobs_locked');
    UPDATE mjsched.scheduled_job j SET status = 'Paused' WHERE j.id = ANY (v_ids) AND j.status = 'Active';
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    INSERT INTO mjsched.job_pause AS p
           (scheduled_job_id, paused_at, paused_by, paused_by_user, pause_reason, paused_until, tag)
    SELECT i.id, v_now, session_user, p_user, p_reason, p_until, p_tag FROM unnest(v_ids) AS i(id)
    ON CONFLICT (scheduled_job_id) DO UPDATE
       SET paused_at = EXCLUDED.paused_at, paused_by = EXCLUDED.paused_by, paused_by_user = EXCLUDED.paused_by_user,
           pause_reason = EXCLUDED.pause_reason, paused_until = EXCLUDED.paused_until, tag = EXCLUDED.tag;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- resume_jobs: every Paused job carrying p_tag becomes Active (however it was paused), its
-- pause record ended; the engines give it its next run from now (missed ticks are not run).
-- Returns how many; a replay finds them Active and answers 0.
CREATE OR REPLACE FUNCTION mjsched.resume_jobs(p_tag varchar, p_now timestamptz DEFAULT NULL)
RETURNS TABLE (resumed integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_rows integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    PERFORM mjsched.check_tag(p_tag);
    v_ids := ARRAY(SELECT j.id FROM mjsched.scheduled_job j
                    WHERE j.status = 'Paused'
                      AND j.id IN (SELECT g.scheduled_job_id FROM mjsched.job_tag g WHERE g.tag = p_tag)
                    ORDER BY j.id
                      FOR NO KEY UPDATE);
    PERFORM mjsched.test_pause('resume_jobs:jobs_locked');
    UPDATE mjsched.scheduled_job j SET status = 'Active', next_run_at = NULL
     WHERE j.id = ANY (v_ids) AND j.status = 'Paused';
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    DELETE FROM mjsched.job_pause p WHERE p.scheduled_job_id = ANY (v_ids);
    RETURN QUERY SELECT v_rows;
END;
$$;

-- resume_paused_jobs: the end of the maintenance windows that have passed (claim_due_jobs calls
-- it while one has). The candidate jobs are locked first, SKIP LOCKED (one being paused or edited
-- right now is resumed by a later claim), then the window is read again in a statement of its
-- own: every writer of job_pause holds the job's row, so that statement sees the pause as it is
-- now (one renewed meanwhile by a later pause_jobs is not ended). Returns how many resumed.
CREATE OR REPLACE FUNCTION mjsched.resume_paused_jobs(p_now timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_ids uuid[];
    v_rows integer;
BEGIN
    v_ids := ARRAY(SELECT j.id FROM mjsched.scheduled_job j
                    WHERE j.status = 'Paused'
                      AND j.id IN (SELECT p.scheduled_job_id FROM mjsched.job_pause p WHERE p.paused_until <= p_now)
                      FOR NO KEY UPDATE SKIP LOCKED);
    IF cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH ended AS (
        DELETE FROM mjsched.job_pause p
         WHERE p.scheduled_job_id = ANY (v_ids) AND p.paused_until <= p_now
     RETURNING p.scheduled_job_id
    )
    UPDATE mjsched.scheduled_job j SET status = 'Active', next_run_at = NULL
      FROM ended e
     WHERE j.id = e.scheduled_job_id AND j.status = 'Paused';
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END;
$$;

-- ---------------------------------------------------------------------------------------------
-- A cluster-wide concurrency limit per tag (issue 37 item 2): at most max_running runs of jobs
-- carrying the tag are Running at once, across every engine.
--
-- * tag_limit: one row per limited tag (set_tag_limit; no row: no limit). max_running 0 holds
--   every scheduled run of the tag back.
-- * The claims enforce it, under the same locks as one run per tick: once a claim has locked
--   its candidate jobs, when any of them carries a limited tag it locks every tag_limit row it
--   can without waiting (admit_by_tag_limits: SKIP LOCKED, so neither another claim nor an
--   outsider's open transaction on a limit row ever stalls a claim, and no two claims wait for
--   each other); then, in a statement of its own (it sees every run committed before it got
--   the rows), it counts the Running runs of each limited tag and admits its candidates in
--   claim order while each of their limited tags has a free slot. A limit row it could not lock
--   counts as no free slot: the jobs of that tag wait for a later claim (a poll later when
--   another claim held it; while an outsider holds it, until the outsider lets go), the other
--   candidates are not held. A claim that holds a limit's row is the only one that can add a
--   Running run of that tag until it commits, so no interleaving takes a tag past its limit. A
--   candidate held back stays as it was (its row lock ends with the claim).
-- * Before locking, a claim leaves out the jobs of tags already at their limit (tags_at_limit,
--   read without locks), so jobs waiting for a slot never crowd a poll's batch; and claim_due_jobs
--   claims again while a round claimed something and slots are left, since a round's candidates
--   held back may have hidden other due jobs.
-- * Manual runs (start_manual_run: execute_job, the dashboard's "run now") are an operator's
--   deliberate run: never held back by a limit, but counted while they run (scheduled runs of
--   the tag wait for them).
-- * Every Running run counts, a lapsed one included until it is swept or taken over.

CREATE TABLE IF NOT EXISTS mjsched.tag_limit (
    tag         varchar(64) NOT NULL,
    max_running integer NOT NULL,
    set_at      timestamptz NOT NULL,
    set_by      varchar(255) NOT NULL,      -- the database login
    set_by_user varchar(255),               -- the application's user, when the caller named one
    CONSTRAINT pk_tag_limit PRIMARY KEY (tag),
    CONSTRAINT ck_tag_limit_tag CHECK (tag ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    CONSTRAINT ck_tag_limit_max_running CHECK (max_running BETWEEN 0 AND 100000)
);

-- set_tag_limit: at most p_max_running runs of the tag's jobs Running at once (NULL: no limit).
-- Returns 1. A replay writes the same row (or finds it gone).
CREATE OR REPLACE FUNCTION mjsched.set_tag_limit(
    p_tag varchar, p_max_running integer, p_user varchar DEFAULT NULL)
RETURNS TABLE (changed integer)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    PERFORM mjsched.check_tag(p_tag);
    IF p_max_running IS NOT NULL AND p_max_running NOT BETWEEN 0 AND 100000 THEN
        RAISE EXCEPTION 'max_running=%: must be between 0 and 100000 (NULL lifts the limit)', p_max_running
            USING ERRCODE = '22023';
    END IF;
    IF length(p_user) > 255 THEN
        RAISE EXCEPTION 'user: % characters long; at most 255 allowed', length(p_user) USING ERRCODE = '22023';
    END IF;
    IF p_max_running IS NULL THEN
        DELETE FROM mjsched.tag_limit l WHERE l.tag = p_tag;
    ELSE
        INSERT INTO mjsched.tag_limit AS l (tag, max_running, set_at, set_by, set_by_user)
        VALUES (p_tag, p_max_running, now(), session_user, p_user)
        ON CONFLICT (tag) DO UPDATE
           SET max_running = EXCLUDED.max_running, set_at = EXCLUDED.set_at, set_by = EXCLUDED.set_by,
               set_by_user = EXCLUDED.set_by_user;
    END IF;
    RETURN QUERY SELECT 1;
END;
$$;

-- tags_at_limit: the limited tags with no free slot now (read without locks: the claims leave
-- those tags' jobs out of their candidates; admit_by_tag_limits decides under the locks).
DROP FUNCTION IF EXISTS mjsched.tags_at_limit();
CREATE FUNCTION mjsched.tags_at_limit() RETURNS TABLE (tag varchar)
LANGUAGE sql STABLE AS $$
    SELECT l.tag
      FROM mjsched.tag_limit l
     WHERE l.max_running <= (SELECT count(*) FROM mjsched.job_tag g
                               JOIN mjsched.scheduled_job_run r ON r.scheduled_job_id = g.scheduled_job_id
                              WHERE g.tag = l.tag AND r.status = 'Running')
$$;

-- admit_by_tag_limits: of the candidate jobs a claim holds (in claim order), those it may start
-- now without taking a tag past its limit, in the same order (see the header of this part), and
-- the lock tokens of their lapsed holders (what the claim takes over).
DROP FUNCTION IF EXISTS mjsched.admit_by_tag_limits(uuid[]);
CREATE FUNCTION mjsched.admit_by_tag_limits(p_ids uuid[]) RETURNS TABLE (ids uuid[], old uuid[])
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_tags varchar[];
    v_held varchar[];    -- the limits this claim holds (a limit it could not lock admits nothing)
    v_free integer[];
    v_mine integer[];
    v_out uuid[] := '{}'::uuid[];
    v_id uuid;
    v_k integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mjsched.job_tag g JOIN mjsched.tag_limit l ON l.tag = g.tag
                    WHERE g.scheduled_job_id = ANY (p_ids)) THEN
        v_out := p_ids;
    ELSE
        -- every limit this claim can have now, never waiting: a limit row another session
        -- holds (another claim for milliseconds, or an outsider's open transaction for as long
        -- as it likes) is skipped, and its tag counts as full for this claim
        v_held := ARRAY(SELECT l.tag FROM mjsched.tag_limit l ORDER BY l.tag FOR UPDATE SKIP LOCKED);
        PERFORM mjsched.test_pause('claim_due_jobs:tag_limits_locked');
        -- a statement of its own: it sees every run committed before the limits were ours
        SELECT coalesce(array_agg(l.tag ORDER BY l.tag), '{}'),
               coalesce(array_agg(CASE WHEN l.tag = ANY (v_held)
                                       THEN (l.max_running - (SELECT count(*) FROM mjsched.job_tag g
                                                                JOIN mjsched.scheduled_job_run r
                                                                  ON r.scheduled_job_id = g.scheduled_job_id
                                                               WHERE g.tag = l.tag AND r.status = 'Running'))::integer
                                       ELSE 0 END
                                  ORDER BY l.tag), '{}')
          INTO v_tags, v_free
          FROM mjsched.tag_limit l;
        FOREACH v_id IN ARRAY p_ids LOOP
            v_mine := ARRAY(SELECT array_position(v_tags, g.tag) FROM mjsched.job_tag g
                             WHERE g.scheduled_job_id = v_id AND g.tag = ANY (v_tags));
            IF NOT EXISTS (SELECT 1 FROM unnest(v_mine) AS k(i) WHERE v_free[k.i] <= 0) THEN
                v_out := v_out || v_id;
                FOREACH v_k IN ARRAY v_mine LOOP
                    v_free[v_k] := v_free[v_k] - 1;
                END LOOP;
            END IF;
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT v_out, coalesce((SELECT array_agg(j.lock_token) FROM mjsched.scheduled_job j
                             WHERE j.id = ANY (v_out) AND j.lock_token IS NOT NULL), '{}');
END;
$$;

-- Security (as 003_security.sql does for the scripts before it, which ran before this one): the
-- procedures a role calls run as their owner with a fixed search_path; the building blocks run
-- only inside them; nothing here is executable by PUBLIC (grants.sql grants the roles).
ALTER FUNCTION mjsched.pause_jobs(varchar, varchar, timestamptz, varchar, timestamptz)
    SECURITY DEFINER SET search_path = mjsched, pg_temp;
ALTER FUNCTION mjsched.resume_jobs(varchar, timestamptz) SECURITY DEFINER SET search_path = mjsched, pg_temp;
ALTER FUNCTION mjsched.set_tag_limit(varchar, integer, varchar) SECURITY DEFINER SET search_path = mjsched, pg_temp;
REVOKE ALL ON FUNCTION mjsched.pause_jobs(varchar, varchar, timestamptz, varchar, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.resume_jobs(varchar, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.set_tag_limit(varchar, integer, varchar) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.tag_problem(varchar) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.check_tag(varchar) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.resume_paused_jobs(timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.tags_at_limit() FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.admit_by_tag_limits(uuid[]) FROM PUBLIC;
