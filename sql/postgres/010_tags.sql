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
