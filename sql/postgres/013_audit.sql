-- mjsched audit trail, version 13: every change to a job's definition leaves rows in
-- mjsched.job_change, whoever made it and however (docs/guide/operations.md, "Audit trail").
--
-- * Written by triggers on scheduled_job, so a change through the API, the CLI, the dashboard,
--   ensure_job/sync_jobs or plain SQL is recorded alike, in the same transaction as the change.
-- * One row per changed field of an update (field, old value, new value as text; a change to
--   configuration is one row per top-level key, field 'configuration.<key>'); one row for a
--   created job (field '*', new value: the definition as JSON) and one for a deleted job
--   (field '*', old value: the definition as JSON).
-- * Who: db_login is the session's login (session_user: a SECURITY DEFINER procedure does not
--   hide the caller); app_user and via are what the application said through the
--   transaction-local settings mjsched.app_user and mjsched.via (mjsched sets them for each
--   change it makes: via is 'api', 'cli', 'dashboard', 'ensure_job', 'sync_jobs', ...). A
--   change by plain SQL has via 'sql' unless the session set it.
-- * Values are stored as the job table holds them (configuration included: this table is no
--   more secret than scheduled_job, and is granted alike); every surface that shows them masks
--   credentials with the same rules as the job's configuration (mjsched.redaction).
-- * scheduled_job.version (001_schema.sql) counts the changes to a job's definition; each
--   change row carries the version it made, and a run records the version it started with.
-- * The engine's own bookkeeping (locks, next run, statistics, the warned schedule) is not a
--   change: the trigger fires only for UPDATEs that set a definition column ("UPDATE OF"), so
--   claims and completions never run it.
-- Safe to re-run.

CREATE TABLE IF NOT EXISTS mjsched.job_change (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id      uuid NOT NULL,          -- no foreign key: the history outlives a deleted job
    job_name    varchar(200) NOT NULL,
    version     integer NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    action      varchar(10) NOT NULL,
    field       varchar(200) NOT NULL,
    old_value   text,
    new_value   text,
    db_login    varchar(255) NOT NULL DEFAULT session_user,
    app_user    varchar(255),
    via         varchar(40) NOT NULL DEFAULT 'sql',
    CONSTRAINT ck_job_change_action CHECK (action IN ('created', 'updated', 'deleted'))
);
CREATE INDEX IF NOT EXISTS ix_job_change_job ON mjsched.job_change (job_id, id);
CREATE INDEX IF NOT EXISTS ix_job_change_changed_at ON mjsched.job_change (changed_at);

-- One trigger function does it all: BEFORE UPDATE (it moves the version on and writes the
-- changed fields; BEFORE, so the row it sees is final: trg_scheduled_job_changed, which may
-- clear next_run_at or expire the job, runs first, in name order) and AFTER INSERT / DELETE.
-- What is not a definition is the engines' bookkeeping, named once, here.
CREATE OR REPLACE FUNCTION mjsched.tg_scheduled_job_audited() RETURNS trigger
LANGUAGE plpgsql SET search_path = mjsched, pg_temp AS $$
DECLARE
    v_bookkeeping CONSTANT text[] := ARRAY['id', 'next_run_at', 'last_run_at', 'last_success_at', 'run_count',
        'success_count', 'failure_count', 'last_duration_ms', 'total_duration_ms', 'lock_token', 'locked_at',
        'locked_by_instance', 'expected_completion_at', 'created_at', 'updated_at', 'frequency_warned',
        'retry_count', 'version', 'fence_seq'];
    v_user varchar(255) := nullif(current_setting('mjsched.app_user', true), '');
    v_via varchar(40) := coalesce(nullif(current_setting('mjsched.via', true), ''), 'sql');
    v_old jsonb;
    v_new jsonb;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, new_value, app_user, via)
        VALUES (NEW.id, NEW.name, NEW.version, 'created', '*', (to_jsonb(NEW) - v_bookkeeping)::text, v_user, v_via);
        PERFORM set_config('mjsched.audit_job', NEW.id::text || '|' || NEW.version || '|', true);
        RETURN NULL;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, old_value, app_user, via)
        VALUES (OLD.id, OLD.name, OLD.version, 'deleted', '*', (to_jsonb(OLD) - v_bookkeeping)::text, v_user, v_via);
        RETURN NULL;
    END IF;
    v_old := to_jsonb(OLD) - v_bookkeeping;
    v_new := to_jsonb(NEW) - v_bookkeeping;
    IF v_old = v_new THEN
        RETURN NEW;
    END IF;
    NEW.version := OLD.version + 1;
    -- this transaction made this version of the job: a tag change in it joins the version
    PERFORM set_config('mjsched.audit_job', NEW.id::text || '|' || NEW.version || '|', true);
    INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, old_value, new_value, app_user, via)
    SELECT NEW.id, NEW.name, NEW.version, 'updated', c.field, c.old_value, c.new_value, v_user, v_via
      FROM (SELECT coalesce(o.key, n.key) AS field, o.value #>> '{}' AS old_value, n.value #>> '{}' AS new_value
              FROM jsonb_each(v_old - 'configuration') o
              FULL JOIN jsonb_each(v_new - 'configuration') n ON n.key = o.key
             WHERE o.value IS DISTINCT FROM n.value
            UNION ALL
            SELECT 'configuration.' || coalesce(o.key, n.key), o.value::text, n.value::text
              FROM jsonb_each(CASE jsonb_typeof(OLD.configuration) WHEN 'object' THEN OLD.configuration
                                                                   ELSE '{}'::jsonb END) o
              FULL JOIN jsonb_each(CASE jsonb_typeof(NEW.configuration) WHEN 'object' THEN NEW.configuration
                                                                        ELSE '{}'::jsonb END) n ON n.key = o.key
             WHERE o.value IS DISTINCT FROM n.value) AS c
     ORDER BY c.field;
    RETURN NEW;
END;
$$;

-- The UPDATE trigger fires only for a statement that sets a definition column (every column
-- but the bookkeeping ones; tests/integration/test_audit.py checks this list against the
-- catalog, so a column added later must be put here or named bookkeeping above).
DROP TRIGGER IF EXISTS trg_scheduled_job_audited ON mjsched.scheduled_job;
DROP TRIGGER IF EXISTS trg_scheduled_job_audited_write ON mjsched.scheduled_job;
CREATE TRIGGER trg_scheduled_job_audited
    BEFORE UPDATE OF
        name, description, job_type_id, cron_expression, interval_seconds, run_at, timezone,
        start_at, end_at, status, configuration, owner, concurrency_mode, missed_run_policy,
        run_immediately_if_never_run, max_runtime_seconds, isolation, max_queued_runs,
        notify_on_success, notify_on_failure, notify_to, high_frequency_ok, keep_runs_days,
        keep_runs_count, retry_max_attempts, retry_initial_delay, retry_factor, retry_max_delay,
        retry_jitter, notify_final_attempt_only, jitter_seconds, priority
    ON mjsched.scheduled_job
    FOR EACH ROW EXECUTE FUNCTION mjsched.tg_scheduled_job_audited();
CREATE TRIGGER trg_scheduled_job_audited_write
    AFTER INSERT OR DELETE ON mjsched.scheduled_job
    FOR EACH ROW EXECUTE FUNCTION mjsched.tg_scheduled_job_audited();
REVOKE ALL ON FUNCTION mjsched.tg_scheduled_job_audited() FROM PUBLIC;

-- Tags are part of a job's definition (010_tags.sql): a statement that adds or removes rows of
-- job_tag writes one job_change row per job whose tag set changed: field 'tags', the sets
-- before and after as sorted comma lists (NULL: none), action 'updated', who and via as above.
-- A tag change is a definition change, so it moves scheduled_job.version on, except where
-- this transaction already made the job's current version (tg_scheduled_job_audited notes it
-- in the transaction-local setting mjsched.audit_job: job|version|tags row): a job created
-- with tags, or update_job changing fields and tags, is one version. update_job replaces a
-- set in two statements (DELETE the dropped tags, INSERT the new ones); the second finds the
-- first one's row in the same setting and moves its new value on, so one call is one row.
-- The tags of a job being deleted go with it unrecorded: its 'deleted' row says so.
CREATE OR REPLACE FUNCTION mjsched.tg_job_tag_audited() RETURNS trigger
LANGUAGE plpgsql SET search_path = mjsched, pg_temp AS $$
DECLARE
    v_user varchar(255) := nullif(current_setting('mjsched.app_user', true), '');
    v_via varchar(40) := coalesce(nullif(current_setting('mjsched.via', true), ''), 'sql');
    v_ids uuid[];
    v_tags varchar[];
    r record;
    v_name varchar(200);
    v_version integer;
    v_old text;
    v_new text;
    v_mark text[];
    v_change bigint;
    v_rows integer;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(a.scheduled_job_id), array_agg(a.tag) INTO v_ids, v_tags FROM added_tags a;
    ELSE
        SELECT array_agg(d.scheduled_job_id), array_agg(d.tag) INTO v_ids, v_tags FROM removed_tags d;
    END IF;
    FOR r IN SELECT x.job_id, array_agg(x.tag) AS tags
               FROM unnest(coalesce(v_ids, '{}'), coalesce(v_tags, '{}')) AS x(job_id, tag)
              GROUP BY x.job_id ORDER BY x.job_id LOOP
        SELECT j.name, j.version INTO v_name, v_version FROM mjsched.scheduled_job j WHERE j.id = r.job_id FOR UPDATE;
        CONTINUE WHEN NOT FOUND;     -- deleted with its job
        SELECT string_agg(g.tag, ',' ORDER BY g.tag) INTO v_new FROM mjsched.job_tag g WHERE g.scheduled_job_id = r.job_id;
        SELECT string_agg(t.tag, ',' ORDER BY t.tag) INTO v_old
          FROM (SELECT g.tag FROM mjsched.job_tag g
                 WHERE g.scheduled_job_id = r.job_id AND (TG_OP = 'DELETE' OR NOT g.tag = ANY (r.tags))
                UNION
                SELECT u.tag FROM unnest(r.tags) AS u(tag) WHERE TG_OP = 'DELETE') t;
        CONTINUE WHEN v_old IS NOT DISTINCT FROM v_new;
        v_mark := string_to_array(coalesce(current_setting('mjsched.audit_job', true), ''), '|');
        IF v_mark[1] = r.job_id::text AND v_mark[2] = v_version::text THEN
            IF coalesce(v_mark[3], '') <> '' THEN
                UPDATE mjsched.job_change c SET new_value = v_new
                 WHERE c.id = v_mark[3]::bigint AND c.job_id = r.job_id AND c.field = 'tags';
                GET DIAGNOSTICS v_rows = ROW_COUNT;
                CONTINUE WHEN v_rows > 0;
            END IF;
        ELSE
            UPDATE mjsched.scheduled_job j SET version = j.version + 1, updated_at = now()
             WHERE j.id = r.job_id RETURNING j.version INTO v_version;
        END IF;
        INSERT INTO mjsched.job_change (job_id, job_name, version, action, field, old_value, new_value, app_user, via)
        VALUES (r.job_id, v_name, v_version, 'updated', 'tags', v_old, v_new, v_user, v_via)
        RETURNING id INTO v_change;
        PERFORM set_config('mjsched.audit_job', r.job_id::text || '|' || v_version || '|' || v_change, true);
    END LOOP;
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS trg_job_tag_audited ON mjsched.job_tag;
DROP TRIGGER IF EXISTS trg_job_tag_audited_delete ON mjsched.job_tag;
CREATE TRIGGER trg_job_tag_audited
    AFTER INSERT ON mjsched.job_tag REFERENCING NEW TABLE AS added_tags
    FOR EACH STATEMENT EXECUTE FUNCTION mjsched.tg_job_tag_audited();
CREATE TRIGGER trg_job_tag_audited_delete
    AFTER DELETE ON mjsched.job_tag REFERENCING OLD TABLE AS removed_tags
    FOR EACH STATEMENT EXECUTE FUNCTION mjsched.tg_job_tag_audited();
REVOKE ALL ON FUNCTION mjsched.tg_job_tag_audited() FROM PUBLIC;

-- Retention: a change row goes with the job's run-history rule in days (the job's
-- keep_runs_days, else the caller's default p_keep_seconds; 0 or NULL keeps it), a deleted
-- job's rows with the default. At most p_batch_size rows per call, the oldest first; answers
-- how many went.
DROP FUNCTION IF EXISTS mjsched.purge_job_changes(double precision, integer, timestamptz);
CREATE FUNCTION mjsched.purge_job_changes(p_keep_seconds double precision,
                                                     p_batch_size integer DEFAULT 1000,
                                                     p_now timestamptz DEFAULT NULL)
RETURNS TABLE (purged integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
DECLARE
    v_now timestamptz;
    v_gone integer;
BEGIN
    PERFORM mjsched.check_test_clock(p_now);
    v_now := coalesce(p_now, now());
    IF p_keep_seconds IS NOT NULL AND NOT (p_keep_seconds >= 0 AND p_keep_seconds <= 3153600000) THEN
        RAISE EXCEPTION 'keep_seconds=% must be a number of seconds in [0, 3153600000] (100 years)', p_keep_seconds
            USING ERRCODE = '22023';
    END IF;
    IF p_batch_size IS NULL OR NOT (p_batch_size BETWEEN 1 AND 4000) THEN
        RAISE EXCEPTION 'batch_size=% must be between 1 and 4000', p_batch_size USING ERRCODE = '22023';
    END IF;
    DELETE FROM mjsched.job_change AS c
     WHERE c.id IN (SELECT x.id
                      FROM mjsched.job_change x
                      LEFT JOIN mjsched.scheduled_job j ON j.id = x.job_id
                      CROSS JOIN LATERAL (SELECT CASE WHEN j.keep_runs_days IS NOT NULL
                                                      THEN nullif(j.keep_runs_days, 0) * 86400.0
                                                      ELSE nullif(p_keep_seconds, 0) END AS keep) AS k
                     WHERE k.keep IS NOT NULL AND x.changed_at < v_now - k.keep * interval '1 second'
                     ORDER BY x.changed_at
                     LIMIT p_batch_size);
    GET DIAGNOSTICS v_gone = ROW_COUNT;
    RETURN QUERY SELECT v_gone;
END;
$$;
REVOKE ALL ON FUNCTION mjsched.purge_job_changes(double precision, integer, timestamptz) FROM PUBLIC;
