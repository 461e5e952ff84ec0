-- KernelWatch on a shared PostgreSQL: who may write the baseline's history.
--
-- Run once as the database's owner (the role the nightly job uses, which created the tables with
-- `kernelwatch doctor --db ...` or its first ingest), after the tables exist; again after an upgrade adds tables.
-- It creates the role a pull request's job logs in as, kernelwatch_pr, which may
--   * read everything (the gate reads main's history),
--   * store runs of any branch but the baseline branches ('main'; edit the list in the two policies), with trigger
--     'pr', and their results,
--   * store confirmations (`kernelwatch confirm --db` in the pull request's job),
-- and nothing else: the server refuses its insert of a main run ("new row violates row-level security policy").
-- The owner (nightly, manual) is not subject to the policies. Give the PR job's secret
-- postgresql+psycopg://kernelwatch_pr:PASSWORD@host/db, the nightly's the owner's URL.
-- Replace CHANGE-ME before running; tests/test_no_silent_pass.py runs this file against a real server.

CREATE ROLE kernelwatch_pr LOGIN PASSWORD 'CHANGE-ME';
GRANT USAGE ON SCHEMA public TO kernelwatch_pr;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO kernelwatch_pr;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO kernelwatch_pr;
GRANT INSERT ON run, accuracy_result, perf_result, profiler_metric, kernel_case, hardware, confirmation
    TO kernelwatch_pr;
GRANT UPDATE (ceiling) ON kernel_case TO kernelwatch_pr;

ALTER TABLE run ENABLE ROW LEVEL SECURITY;
ALTER TABLE accuracy_result ENABLE ROW LEVEL SECURITY;
ALTER TABLE perf_result ENABLE ROW LEVEL SECURITY;
ALTER TABLE profiler_metric ENABLE ROW LEVEL SECURITY;

CREATE POLICY kernelwatch_pr_read ON run FOR SELECT TO kernelwatch_pr USING (true);
CREATE POLICY kernelwatch_pr_own_branch ON run FOR INSERT TO kernelwatch_pr
    WITH CHECK ("trigger" = 'pr' AND branch NOT IN ('main'));

CREATE POLICY kernelwatch_pr_read ON accuracy_result FOR SELECT TO kernelwatch_pr USING (true);
CREATE POLICY kernelwatch_pr_own_runs ON accuracy_result FOR INSERT TO kernelwatch_pr
    WITH CHECK (EXISTS (SELECT 1 FROM run r WHERE r.id = run_id AND r."trigger" = 'pr' AND r.branch NOT IN ('main')));
CREATE POLICY kernelwatch_pr_read ON perf_result FOR SELECT TO kernelwatch_pr USING (true);
CREATE POLICY kernelwatch_pr_own_runs ON perf_result FOR INSERT TO kernelwatch_pr
    WITH CHECK (EXISTS (SELECT 1 FROM run r WHERE r.id = run_id AND r."trigger" = 'pr' AND r.branch NOT IN ('main')));
CREATE POLICY kernelwatch_pr_read ON profiler_metric FOR SELECT TO kernelwatch_pr USING (true);
CREATE POLICY kernelwatch_pr_own_runs ON profiler_metric FOR INSERT TO kernelwatch_pr
    WITH CHECK (EXISTS (SELECT 1 FROM run r WHERE r.id = run_id AND r."trigger" = 'pr' AND r.branch NOT IN ('main')));
