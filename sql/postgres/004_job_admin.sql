-- mjsched job administration, version 4: create, change and delete jobs through
-- procedures, so the EXECUTE-only engine role (grants.sql) can manage jobs without any
-- write privilege on the tables. Only definition and schedule columns can be written
-- here; lock, lease and statistics columns belong to the lock procedures.
-- p_fields is a JSON object of column -> value; absent keys keep their default (insert)
-- or their current value (update). Unknown keys are an error naming the key.

-- check_job_fields: the keys are job columns that can be set, each value converts to its
-- column's type, and each value keeps the rules the API checks (mjsched/validation.py) and
-- the table enforces (001_schema.sql, "What a row may hold"): the error names the field and
-- the value (SQLSTATE 22023), before anything is written. The EXECUTE-only engine role
-- writes jobs through here, so it cannot store a NaN or 1e13 max_runtime, an infinite or
-- year-1 instant, or an unknown status either.
CREATE OR REPLACE FUNCTION mjsched.check_job_fields(p_fields jsonb) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_key text;
    v_value text;
    r mjsched.scheduled_job;
BEGIN
    IF p_fields IS NULL OR jsonb_typeof(p_fields) <> 'object' THEN
        RAISE EXCEPTION 'fields must be a JSON object' USING ERRCODE = '22023';
    END IF;
    SELECT k INTO v_key FROM jsonb_object_keys(p_fields) k
     WHERE k NOT IN ('job_type_id', 'name', 'description', 'cron_expression', 'timezone', 'start_at',
                     'end_at', 'status', 'configuration', 'owner', 'concurrency_mode', 'missed_run_policy',
                     'run_immediately_if_never_run', 'max_runtime_seconds', 'isolation', 'max_queued_runs',
                     'notify_on_success', 'notify_on_failure', 'notify_to', 'next_run_at', 'high_frequency_ok',
                     'keep_runs_days', 'keep_runs_count',
                     'interval_seconds', 'run_at',
                     'retry_max_attempts', 'retry_initial_delay', 'retry_factor', 'retry_max_delay', 'retry_jitter',
                     'notify_final_attempt_only', 'tags', 'jitter_seconds', 'priority')
     LIMIT 1;
    IF v_key IS NOT NULL THEN
        RAISE EXCEPTION 'fields.%: not a job column that can be set', v_key USING ERRCODE = '22023';
    END IF;
    -- Each value on its own, so a value of the wrong type is named (not just "invalid input").
    FOR v_key IN SELECT k FROM jsonb_object_keys(p_fields) k ORDER BY k LOOP
        BEGIN
            r := jsonb_populate_record(NULL::mjsched.scheduled_job, jsonb_build_object(v_key, p_fields -> v_key));
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'fields.%: % is not a valid value (%)', v_key, left(p_fields ->> v_key, 200), SQLERRM
                USING ERRCODE = '22023';
        END;
    END LOOP;
    r := jsonb_populate_record(NULL::mjsched.scheduled_job, p_fields);
    -- tags (010_tags.sql): the job's whole set, a JSON array of at most 32 tags
    IF p_fields ? 'tags' THEN
        IF jsonb_typeof(p_fields -> 'tags') <> 'array' OR jsonb_array_length(p_fields -> 'tags') > 32 THEN
            RAISE EXCEPTION 'fields.tags: % must be a JSON array of at most 32 tags', left(p_fields ->> 'tags', 200)
                USING ERRCODE = '22023';
        END IF;
        SELECT e.value::text, coalesce(mjsched.tag_problem(e.value #>> '{}'), 'must be a string') INTO v_key, v_value
          FROM jsonb_array_elements(p_fields -> 'tags') e
         WHERE jsonb_typeof(e.value) <> 'string' OR mjsched.tag_problem(e.value #>> '{}') IS NOT NULL
         LIMIT 1;
        IF v_key IS NOT NULL THEN
            RAISE EXCEPTION 'fields.tags: % %', left(v_key, 200), v_value USING ERRCODE = '22023';
        END IF;
    END IF;
    IF r.max_runtime_seconds IS NOT NULL
       AND NOT (r.max_runtime_seconds > 0 AND r.max_runtime_seconds <= 31536000) THEN
        -- NaN compares greater than every number: "<= 31536000" refuses it
        RAISE EXCEPTION 'fields.max_runtime_seconds: % must be a finite number of seconds in (0, 31536000] (one year)',
            r.max_runtime_seconds USING ERRCODE = '22023';
    END IF;
    FOR v_key, v_value IN
        SELECT f.k, f.t::text
          FROM (VALUES ('start_at', r.start_at), ('end_at', r.end_at), ('next_run_at', r.next_run_at),
                       ('run_at', r.run_at)) AS f (k, t)
         WHERE NOT (f.t BETWEEN '1900-01-01 00:00:00+00'
                            AND CASE WHEN f.k = 'run_at' THEN '9999-12-30 00:00:00+00'::timestamptz
                                     ELSE '9999-12-31 00:00:00+00'::timestamptz END)
    LOOP
        RAISE EXCEPTION 'fields.%: % must lie between 1900-01-01 00:00 and % 00:00 UTC', v_key, v_value,
            CASE WHEN v_key = 'run_at' THEN '9999-12-30' ELSE '9999-12-31' END USING ERRCODE = '22023';
    END LOOP;
    IF r.start_at IS NOT NULL AND r.end_at IS NOT NULL AND r.start_at >= r.end_at THEN
        RAISE EXCEPTION 'fields.end_at: % must be after start_at (%)', r.end_at, r.start_at USING ERRCODE = '22023';
    END IF;
    IF p_fields ? 'name' AND (r.name IS NULL OR length(btrim(r.name)) = 0) THEN
        RAISE EXCEPTION 'fields.name: % must not be empty', coalesce(quote_literal(r.name), 'null')
            USING ERRCODE = '22023';
    END IF;
    -- A job's schedule is exactly one of cron_expression, interval_seconds and run_at
    -- (007_schedule_kinds.sql): a write that gives one of them gives the three (NULL for the
    -- other two), so the kinds it leaves are known here. cron_expression is NULL for the others.
    IF p_fields ? 'cron_expression' AND length(btrim(r.cron_expression)) = 0 THEN
        RAISE EXCEPTION 'fields.cron_expression: % must not be empty', quote_literal(r.cron_expression)
            USING ERRCODE = '22023';
    END IF;
    IF r.interval_seconds NOT BETWEEN 1 AND 31622400 THEN
        RAISE EXCEPTION 'fields.interval_seconds: % must be an interval of 1 to 31622400 seconds (366 days)',
            r.interval_seconds USING ERRCODE = '22023';
    END IF;
    IF (p_fields ?| ARRAY['cron_expression', 'interval_seconds', 'run_at'])
       AND (r.cron_expression IS NOT NULL)::integer + (r.interval_seconds IS NOT NULL)::integer
           + (r.run_at IS NOT NULL)::integer <> 1 THEN
        RAISE EXCEPTION 'fields.cron_expression: %, interval_seconds: %, run_at: %: a job has exactly one schedule '
                        '(give one of them, the other two null)',
            coalesce(quote_literal(r.cron_expression), 'null'), coalesce(r.interval_seconds::text, 'null'),
            coalesce(r.run_at::text, 'null') USING ERRCODE = '22023';
    END IF;
    IF p_fields ? 'timezone' AND (r.timezone IS NULL OR length(btrim(r.timezone)) = 0) THEN
        RAISE EXCEPTION 'fields.timezone: % must not be empty', coalesce(quote_literal(r.timezone), 'null')
            USING ERRCODE = '22023';
    END IF;
    IF length(r.description) > 100000 THEN
        RAISE EXCEPTION 'fields.description: % characters long; at most 100000 allowed', length(r.description)
            USING ERRCODE = '22023';
    END IF;
    IF r.configuration IS NOT NULL AND jsonb_typeof(r.configuration) <> 'object' THEN
        RAISE EXCEPTION 'fields.configuration: a JSON % must be a JSON object', jsonb_typeof(r.configuration)
            USING ERRCODE = '22023';
    END IF;
    IF mjsched.json_nesting_exceeds(r.configuration, 64) THEN
        RAISE EXCEPTION 'fields.configuration: JSON nested deeper than 64 levels of objects and arrays; at most 64 '
                        'allowed' USING ERRCODE = '22023';
    END IF;
    IF octet_length(r.configuration::text) > 1000000 THEN
        RAISE EXCEPTION 'fields.configuration: % bytes; at most 1000000 allowed', octet_length(r.configuration::text)
            USING ERRCODE = '22023';
    END IF;
    IF r.status NOT IN ('Pending', 'Active', 'Paused', 'Disabled', 'Expired') THEN
        RAISE EXCEPTION 'fields.status: % must be one of Pending, Active, Paused, Disabled, Expired',
            quote_literal(r.status) USING ERRCODE = '22023';
    END IF;
    IF r.concurrency_mode NOT IN ('Skip', 'Queue', 'Concurrent') THEN
        RAISE EXCEPTION 'fields.concurrency_mode: % must be one of Skip, Queue, Concurrent',
            quote_literal(r.concurrency_mode) USING ERRCODE = '22023';
    END IF;
    IF r.missed_run_policy NOT IN ('Skip', 'RunOnce', 'RunAll') THEN
        RAISE EXCEPTION 'fields.missed_run_policy: % must be one of Skip, RunOnce, RunAll',
            quote_literal(r.missed_run_policy) USING ERRCODE = '22023';
    END IF;
    IF r.isolation NOT IN ('thread', 'process') THEN
        RAISE EXCEPTION 'fields.isolation: % must be thread or process', quote_literal(r.isolation)
            USING ERRCODE = '22023';
    END IF;
    IF r.jitter_seconds NOT BETWEEN 1 AND 86400 THEN   -- the rule of 012_jitter.sql
        RAISE EXCEPTION 'fields.jitter_seconds: % must be between 1 and 86400 seconds (one day), or null for none',
            r.jitter_seconds USING ERRCODE = '22023';
    END IF;
    IF r.priority NOT BETWEEN -100 AND 100 THEN   -- the rule of 015_priorities.sql
        RAISE EXCEPTION 'fields.priority: % must be between -100 and 100 (higher runs first)',
            r.priority USING ERRCODE = '22023';
    END IF;
    IF r.max_queued_runs NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'fields.max_queued_runs: % must be between 1 and 1000', r.max_queued_runs
            USING ERRCODE = '22023';
    END IF;
    IF r.keep_runs_days NOT BETWEEN 0 AND 36500 THEN   -- the rules of 006_retention.sql
        RAISE EXCEPTION 'fields.keep_runs_days: % must be between 0 (keep regardless of age) and 36500',
            r.keep_runs_days USING ERRCODE = '22023';
    END IF;
    IF r.keep_runs_count NOT BETWEEN 0 AND 1000000000 THEN
        RAISE EXCEPTION 'fields.keep_runs_count: % must be between 0 (no count kept) and 1000000000',
            r.keep_runs_count USING ERRCODE = '22023';
    END IF;
    -- the retry policy (009_retries.sql): all five keys or none, each inside its rule
    IF p_fields ?| ARRAY['retry_max_attempts', 'retry_initial_delay', 'retry_factor', 'retry_max_delay', 'retry_jitter']
       AND NOT (p_fields ?& ARRAY['retry_max_attempts', 'retry_initial_delay', 'retry_factor', 'retry_max_delay',
                                  'retry_jitter']
                AND ((r.retry_max_attempts IS NULL AND r.retry_initial_delay IS NULL AND r.retry_factor IS NULL
                      AND r.retry_max_delay IS NULL AND r.retry_jitter IS NULL)
                     OR (r.retry_max_attempts IS NOT NULL AND r.retry_initial_delay IS NOT NULL
                         AND r.retry_factor IS NOT NULL AND r.retry_max_delay IS NOT NULL
                         AND r.retry_jitter IS NOT NULL))) THEN
        RAISE EXCEPTION 'fields.retry_max_attempts: a retry policy is all five retry_* values or none (got %)',
            left((SELECT jsonb_object_agg(k, p_fields -> k) FROM jsonb_object_keys(p_fields) k
                   WHERE k LIKE 'retry\_%')::text, 200) USING ERRCODE = '22023';
    END IF;
    IF r.retry_max_attempts NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'fields.retry_max_attempts: % must be between 1 and 100', r.retry_max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF NOT (r.retry_initial_delay >= 0 AND r.retry_initial_delay <= 31536000) THEN
        RAISE EXCEPTION 'fields.retry_initial_delay: % must be a finite number of seconds in [0, 31536000]',
            r.retry_initial_delay USING ERRCODE = '22023';
    END IF;
    IF NOT (r.retry_factor >= 1 AND r.retry_factor <= 100) THEN
        RAISE EXCEPTION 'fields.retry_factor: % must be between 1 and 100', r.retry_factor USING ERRCODE = '22023';
    END IF;
    IF NOT (r.retry_max_delay >= r.retry_initial_delay AND r.retry_max_delay <= 31536000) THEN
        RAISE EXCEPTION 'fields.retry_max_delay: % must be at least retry_initial_delay (%) and at most 31536000',
            r.retry_max_delay, r.retry_initial_delay USING ERRCODE = '22023';
    END IF;
    IF NOT (r.retry_jitter >= 0 AND r.retry_jitter <= 1) THEN
        RAISE EXCEPTION 'fields.retry_jitter: % must be between 0 and 1', r.retry_jitter USING ERRCODE = '22023';
    END IF;
END;
$$;

-- ensure_job_type: the id of the job type for a driver, created on first use.
CREATE OR REPLACE FUNCTION mjsched.ensure_job_type(
    p_driver varchar, p_isolation varchar, p_default_max_runtime double precision)
RETURNS TABLE (job_type_id uuid)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO mjsched.scheduled_job_type (name, driver_class, isolation, default_max_runtime_seconds)
    VALUES (p_driver, p_driver, coalesce(p_isolation, 'thread'), p_default_max_runtime)
    ON CONFLICT DO NOTHING;
    RETURN QUERY SELECT t.id FROM mjsched.scheduled_job_type t WHERE t.driver_class = p_driver;
END;
$$;

-- insert_job: the new job's id. p_fields may hold the "id" the caller chose for it (the
-- backends send a new UUID per creation, the same on every retry of it); without one the job
-- gets a random id. Replay-safe: an id already taken by a job of the same name and job type
-- is the job a call whose reply was lost inserted, and its id is the answer (nothing is
-- written). An id taken by another job is an error naming fields.id (SQLSTATE 22023); a name
-- another job holds is the unique violation of uq_scheduled_job_name, as without an id.
CREATE OR REPLACE FUNCTION mjsched.insert_job(p_fields jsonb)
RETURNS TABLE (job_id uuid)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE
    r mjsched.scheduled_job;
    v_id uuid;
    v_inserted uuid;
BEGIN
    IF jsonb_typeof(p_fields) = 'object' AND jsonb_typeof(p_fields -> 'id') IS DISTINCT FROM 'null' THEN
        BEGIN
            v_id := (p_fields ->> 'id')::uuid;
        EXCEPTION WHEN data_exception THEN
            RAISE EXCEPTION 'fields.id: % is not a valid value (%)', left(p_fields ->> 'id', 200), SQLERRM
                USING ERRCODE = '22023';
        END;
    END IF;
    PERFORM mjsched.check_job_fields(CASE WHEN jsonb_typeof(p_fields) = 'object' THEN p_fields - 'id'
                                          ELSE p_fields END);
    IF NOT (p_fields ?| ARRAY['cron_expression', 'interval_seconds', 'run_at']) THEN
        RAISE EXCEPTION 'fields.cron_expression: a job needs a schedule: cron_expression, interval_seconds or run_at'
            USING ERRCODE = '22023';
    END IF;
    r := jsonb_populate_record(NULL::mjsched.scheduled_job, p_fields - 'id');
    BEGIN
        INSERT INTO mjsched.scheduled_job AS j
               (id, job_type_id, name, description, cron_expression, timezone, start_at, end_at, status,
                configuration, owner, concurrency_mode, missed_run_policy, run_immediately_if_never_run,
                max_runtime_seconds, isolation, max_queued_runs, notify_on_success, notify_on_failure,
                notify_to, next_run_at, high_frequency_ok, keep_runs_days, keep_runs_count,
                interval_seconds, run_at, retry_max_attempts, retry_initial_delay,
                retry_factor, retry_max_delay, retry_jitter, notify_final_attempt_only, jitter_seconds,
                priority)
        VALUES (coalesce(v_id, gen_random_uuid()), r.job_type_id, r.name, r.description, r.cron_expression,
                CASE WHEN p_fields ? 'timezone' THEN r.timezone ELSE 'UTC' END,
                r.start_at, r.end_at,
                CASE WHEN p_fields ? 'status' THEN r.status ELSE 'Pending' END,
                r.configuration, r.owner,
                CASE WHEN p_fields ? 'concurrency_mode' THEN r.concurrency_mode ELSE 'Skip' END,
                CASE WHEN p_fields ? 'missed_run_policy' THEN r.missed_run_policy ELSE 'RunOnce' END,
                coalesce(r.run_immediately_if_never_run, false),
                r.max_runtime_seconds, r.isolation,
                coalesce(r.max_queued_runs, 5),
                coalesce(r.notify_on_success, false),
                coalesce(r.notify_on_failure, true),
                r.notify_to, r.next_run_at,
                coalesce(r.high_frequency_ok, false),
                r.keep_runs_days, r.keep_runs_count, r.interval_seconds, r.run_at,
                r.retry_max_attempts, r.retry_initial_delay, r.retry_factor, r.retry_max_delay, r.retry_jitter,
                coalesce(r.notify_final_attempt_only, true), r.jitter_seconds, coalesce(r.priority, 0))
        RETURNING j.id INTO v_inserted;
        INSERT INTO mjsched.job_tag (scheduled_job_id, tag)
        SELECT DISTINCT v_inserted, t.tag FROM jsonb_array_elements_text(p_fields -> 'tags') AS t(tag)
         WHERE jsonb_typeof(p_fields -> 'tags') = 'array';
    EXCEPTION WHEN unique_violation THEN
        -- The id or the name is taken: by the job an earlier attempt of this call inserted (its
        -- reply lost, or its insert committed while this one waited on it), or by another job.
        SELECT j.id INTO v_inserted FROM mjsched.scheduled_job j
         WHERE j.id = v_id AND j.name = r.name AND j.job_type_id = r.job_type_id;
        IF v_inserted IS NULL AND EXISTS (SELECT 1 FROM mjsched.scheduled_job j WHERE j.id = v_id) THEN
            RAISE EXCEPTION 'fields.id: % is the id of another job (not named %)', v_id, quote_literal(r.name)
                USING ERRCODE = '22023';
        ELSIF v_inserted IS NULL THEN
            RAISE;      -- the name, held by another job (uq_scheduled_job_name)
        END IF;
    END;
    RETURN QUERY SELECT v_inserted;
END;
$$;

CREATE OR REPLACE FUNCTION mjsched.update_job(p_job_id uuid, p_fields jsonb)
RETURNS TABLE (updated integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE
    r mjsched.scheduled_job;
    v_rows integer;
BEGIN
    PERFORM mjsched.check_job_fields(p_fields);
    r := jsonb_populate_record(NULL::mjsched.scheduled_job, p_fields);
    UPDATE mjsched.scheduled_job j SET
        job_type_id = CASE WHEN p_fields ? 'job_type_id' THEN r.job_type_id ELSE j.job_type_id END,
        name = CASE WHEN p_fields ? 'name' THEN r.name ELSE j.name END,
        description = CASE WHEN p_fields ? 'description' THEN r.description ELSE j.description END,
        -- a write that gives one schedule kind replaces the schedule: the kinds it leaves out are cleared
        cron_expression = CASE WHEN p_fields ? 'cron_expression' THEN r.cron_expression
                               WHEN p_fields ?| ARRAY['interval_seconds', 'run_at'] THEN NULL ELSE j.cron_expression END,
        timezone = CASE WHEN p_fields ? 'timezone' THEN r.timezone ELSE j.timezone END,
        start_at = CASE WHEN p_fields ? 'start_at' THEN r.start_at ELSE j.start_at END,
        end_at = CASE WHEN p_fields ? 'end_at' THEN r.end_at ELSE j.end_at END,
        status = CASE WHEN p_fields ? 'status' THEN r.status ELSE j.status END,
        configuration = CASE WHEN p_fields ? 'configuration' THEN r.configuration ELSE j.configuration END,
        owner = CASE WHEN p_fields ? 'owner' THEN r.owner ELSE j.owner END,
        concurrency_mode = CASE WHEN p_fields ? 'concurrency_mode' THEN r.concurrency_mode ELSE j.concurrency_mode END,
        missed_run_policy = CASE WHEN p_fields ? 'missed_run_policy' THEN r.missed_run_policy
                                 ELSE j.missed_run_policy END,
        run_immediately_if_never_run = CASE WHEN p_fields ? 'run_immediately_if_never_run'
                                            THEN r.run_immediately_if_never_run
                                            ELSE j.run_immediately_if_never_run END,
        max_runtime_seconds = CASE WHEN p_fields ? 'max_runtime_seconds' THEN r.max_runtime_seconds
                                   ELSE j.max_runtime_seconds END,
        isolation = CASE WHEN p_fields ? 'isolation' THEN r.isolation ELSE j.isolation END,
        max_queued_runs = CASE WHEN p_fields ? 'max_queued_runs' THEN r.max_queued_runs ELSE j.max_queued_runs END,
        notify_on_success = CASE WHEN p_fields ? 'notify_on_success' THEN r.notify_on_success
                                 ELSE j.notify_on_success END,
        notify_on_failure = CASE WHEN p_fields ? 'notify_on_failure' THEN r.notify_on_failure
                                 ELSE j.notify_on_failure END,
        notify_to = CASE WHEN p_fields ? 'notify_to' THEN r.notify_to ELSE j.notify_to END,
        next_run_at = CASE WHEN p_fields ? 'next_run_at' THEN r.next_run_at ELSE j.next_run_at END,
        high_frequency_ok = CASE WHEN p_fields ? 'high_frequency_ok' THEN coalesce(r.high_frequency_ok, false)
                                 ELSE j.high_frequency_ok END,
        keep_runs_days = CASE WHEN p_fields ? 'keep_runs_days' THEN r.keep_runs_days ELSE j.keep_runs_days END,
        keep_runs_count = CASE WHEN p_fields ? 'keep_runs_count' THEN r.keep_runs_count ELSE j.keep_runs_count END,
        interval_seconds = CASE WHEN p_fields ? 'interval_seconds' THEN r.interval_seconds
                                WHEN p_fields ?| ARRAY['cron_expression', 'run_at'] THEN NULL ELSE j.interval_seconds END,
        run_at = CASE WHEN p_fields ? 'run_at' THEN r.run_at
                      WHEN p_fields ?| ARRAY['cron_expression', 'interval_seconds'] THEN NULL ELSE j.run_at END,
        retry_max_attempts = CASE WHEN p_fields ? 'retry_max_attempts' THEN r.retry_max_attempts
                                  ELSE j.retry_max_attempts END,
        retry_initial_delay = CASE WHEN p_fields ? 'retry_initial_delay' THEN r.retry_initial_delay
                                   ELSE j.retry_initial_delay END,
        retry_factor = CASE WHEN p_fields ? 'retry_factor' THEN r.retry_factor ELSE j.retry_factor END,
        retry_max_delay = CASE WHEN p_fields ? 'retry_max_delay' THEN r.retry_max_delay ELSE j.retry_max_delay END,
        retry_jitter = CASE WHEN p_fields ? 'retry_jitter' THEN r.retry_jitter ELSE j.retry_jitter END,
        notify_final_attempt_only = CASE WHEN p_fields ? 'notify_final_attempt_only'
                                         THEN coalesce(r.notify_final_attempt_only, true)
                                         ELSE j.notify_final_attempt_only END,
        jitter_seconds = CASE WHEN p_fields ? 'jitter_seconds' THEN r.jitter_seconds ELSE j.jitter_seconds END,
        priority = CASE WHEN p_fields ? 'priority' THEN coalesce(r.priority, 0) ELSE j.priority END
     WHERE j.id = p_job_id;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    -- The job's row is ours now (lock order: job, then its tags and pause record). Tags: the
    -- whole set is replaced. A status written here ends a pause_jobs record (010_tags.sql).
    IF v_rows > 0 AND p_fields ? 'tags' THEN
        DELETE FROM mjsched.job_tag g
         WHERE g.scheduled_job_id = p_job_id
           AND NOT (g.tag IN (SELECT t.tag FROM jsonb_array_elements_text(p_fields -> 'tags') AS t(tag)));
        INSERT INTO mjsched.job_tag (scheduled_job_id, tag)
        SELECT DISTINCT p_job_id, t.tag FROM jsonb_array_elements_text(p_fields -> 'tags') AS t(tag)
        ON CONFLICT DO NOTHING;
    END IF;
    IF v_rows > 0 AND p_fields ? 'status' THEN
        DELETE FROM mjsched.job_pause p WHERE p.scheduled_job_id = p_job_id;
    END IF;
    RETURN QUERY SELECT v_rows;
END;
$$;

CREATE OR REPLACE FUNCTION mjsched.delete_job(p_job_id uuid)
RETURNS TABLE (deleted integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    DELETE FROM mjsched.scheduled_job j WHERE j.id = p_job_id;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- initialize_next_runs: the set-based initialize_next_run (002_procedures, which engines of
-- the previous release still call). p_items is a JSON array of {"job_id", "next_run_at"};
-- each job is set only while it is Active and has no next_run_at (compare-and-set, so several
-- engines may reschedule the same page at once: each job is set once). Returns how many were
-- set. Rows are locked in id order and rows locked elsewhere are skipped, never waited for:
-- a page of thousands must not deadlock with a bulk UPDATE in progress, nor wait on an
-- operator's open transaction. A skipped row is being set by another engine, or edited, and
-- the edit's commit notifies the engines (tg_scheduled_job_changed), which fetch it again.
-- The rows are found by primary key only and the compare-and-set is tested on the locked
-- version (FOR UPDATE returns the latest one): right after a bulk edit the statistics still
-- say that no job lacks a next_run_at, and a plan that starts from an index on next_run_at
-- would scan every unscheduled job once per item.
CREATE OR REPLACE FUNCTION mjsched.initialize_next_runs(p_items jsonb)
RETURNS TABLE (initialized integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    IF p_items IS NULL OR jsonb_typeof(p_items) <> 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = '22023';
    END IF;
    WITH items AS MATERIALIZED (
        SELECT i.job_id, min(i.next_run_at) AS next_run_at
          FROM jsonb_to_recordset(p_items) AS i (job_id uuid, next_run_at timestamptz)
         WHERE i.job_id IS NOT NULL AND i.next_run_at IS NOT NULL
         GROUP BY i.job_id
    ), locked AS MATERIALIZED (
        SELECT j.id, j.next_run_at, j.status
          FROM mjsched.scheduled_job j
         WHERE j.id = ANY (ARRAY(SELECT items.job_id FROM items))
         ORDER BY j.id
           FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE mjsched.scheduled_job j
       SET next_run_at = items.next_run_at
      FROM locked JOIN items ON items.job_id = locked.id
     WHERE j.id = locked.id AND locked.next_run_at IS NULL AND locked.status = 'Active';
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

-- note_frequency_warned: an engine remembers that it warned about a job's high frequency, so
-- the warning is said once per job and schedule ever, whichever engine starts. p_items is a
-- JSON array of {"job_id", "schedule"}, schedule being cron_expression (or 'every <n>s' for an
-- interval: mjsched/schedules.py, schedule_text) || ' | ' || timezone as
-- the engine read them (mjsched/engine/housekeeping.py, frequency_key). A job whose schedule changed since
-- is left alone (its new schedule is warned about once more), and rows locked elsewhere are
-- skipped, never waited for: a warning said twice is better than a poll that waits. Returns
-- how many jobs were marked.
CREATE OR REPLACE FUNCTION mjsched.note_frequency_warned(p_items jsonb)
RETURNS TABLE (noted integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = mjsched, pg_temp AS $$
#variable_conflict use_column
DECLARE v_rows integer;
BEGIN
    IF p_items IS NULL OR jsonb_typeof(p_items) <> 'array' THEN
        RAISE EXCEPTION 'items must be a JSON array' USING ERRCODE = '22023';
    END IF;
    WITH items AS MATERIALIZED (
        SELECT i.job_id, min(i.schedule) AS schedule
          FROM jsonb_to_recordset(p_items) AS i (job_id uuid, schedule varchar(322))
         WHERE i.job_id IS NOT NULL AND i.schedule IS NOT NULL
         GROUP BY i.job_id
    ), locked AS MATERIALIZED (
        SELECT j.id, coalesce(j.cron_expression, 'every ' || j.interval_seconds || 's') AS schedule, j.timezone,
               j.frequency_warned
          FROM mjsched.scheduled_job j
         WHERE j.id = ANY (ARRAY(SELECT items.job_id FROM items))
         ORDER BY j.id
           FOR UPDATE OF j SKIP LOCKED
    )
    UPDATE mjsched.scheduled_job j
       SET frequency_warned = items.schedule
      FROM locked JOIN items ON items.job_id = locked.id
     WHERE j.id = locked.id
       AND items.schedule = locked.schedule || ' | ' || locked.timezone
       AND locked.frequency_warned IS DISTINCT FROM items.schedule;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN QUERY SELECT v_rows;
END;
$$;

REVOKE ALL ON FUNCTION mjsched.check_job_fields(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.ensure_job_type(varchar, varchar, double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.insert_job(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.update_job(uuid, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.delete_job(uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.initialize_next_runs(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION mjsched.note_frequency_warned(jsonb) FROM PUBLIC;
