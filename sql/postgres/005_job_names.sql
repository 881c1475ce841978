-- mjsched job names, version 5: a job's name is unique (constraint uq_scheduled_job_name), so an
-- application can declare its jobs by name (engine.ensure_job, engine.sync_jobs, `mjsched jobs
-- apply`) and every API call and CLI verb can take a name where it takes an id.
--
-- A database of an earlier release may hold several jobs of one name (create_job at every
-- start-up added one each time). The upgrade resolves them before it adds the constraint, the
-- same way every time: in each group of jobs of one name, the oldest (created_at, then id) keeps
-- the name; every other is renamed '<name> (duplicate <first 8 hex digits of its id>)' (the name
-- cut to fit 200 characters; the whole id if even that name is taken). Nothing else of a renamed
-- job changes: its id, status, schedule, configuration, statistics and run history stay, so it
-- runs as it did until someone pauses or deletes it (sync_jobs with remove_missing='pause' or
-- 'delete' does, since no declaration names it). Each rename is recorded as a Skipped run of the
-- renamed job whose error_message says what was done (executed_by_instance 'mjsched install',
-- as 001_schema.sql records a job it sets aside), and engine.install() logs it as a WARNING.
-- Names are compared as the constraint compares them: exactly in PostgreSQL.
-- Safe to re-run: with the constraint in place there is nothing to resolve.
DO $$
DECLARE
    v record;
    v_new varchar(200);
BEGIN
    FOR v IN
        SELECT g.id, g.name, g.kept_id, g.n
          FROM (SELECT j.id, j.name, j.created_at,
                       first_value(j.id) OVER w AS kept_id,
                       row_number() OVER w AS rn,
                       count(*) OVER (PARTITION BY j.name) AS n
                  FROM mjsched.scheduled_job j
                WINDOW w AS (PARTITION BY j.name ORDER BY j.created_at, j.id)) g
         WHERE g.rn > 1
         ORDER BY g.name, g.created_at, g.id
    LOOP
        v_new := left(v.name, 179) || ' (duplicate ' || left(v.id::text, 8) || ')';
        IF EXISTS (SELECT 1 FROM mjsched.scheduled_job j WHERE j.name = v_new) THEN
            v_new := left(v.name, 151) || ' (duplicate ' || v.id::text || ')';
        END IF;
        UPDATE mjsched.scheduled_job j SET name = v_new WHERE j.id = v.id;
        INSERT INTO mjsched.scheduled_job_run
               (scheduled_job_id, status, error_message, started_at, completed_at, duration_ms,
                executed_by_instance)
        VALUES (v.id, 'Skipped',
                format('renamed by the schema upgrade: job names are now unique, and %s jobs were named %s; '
                       'the oldest (%s) keeps the name and this one is now %s. Its status, schedule, '
                       'statistics and history are unchanged: pause or delete it if it was a copy of that job, '
                       'or give it a name of its own.',
                       v.n, quote_literal(v.name), v.kept_id, quote_literal(v_new)),
                now(), now(), 0, 'mjsched install');
        RAISE WARNING 'mjsched upgrade: job % renamed from % to % (% jobs had that name; % keeps it)',
            v.id, quote_literal(v.name), quote_literal(v_new), v.n, v.kept_id;
    END LOOP;
END;
$$;

ALTER TABLE mjsched.scheduled_job
    DROP CONSTRAINT IF EXISTS uq_scheduled_job_name,
    ADD CONSTRAINT uq_scheduled_job_name UNIQUE (name);
