--
-- PostgreSQL database dump
--

\restrict cdMhZFu1CcFQ27D395GlXQo6JKDd8yMd6twxNwaAOI8NQEylRQrCX6AeNsAGhVW

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: auth_checks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.auth_checks (
    company text NOT NULL,
    account_ref text NOT NULL,
    version bigint NOT NULL,
    status text NOT NULL,
    fingerprint text NOT NULL,
    provider_driver text NOT NULL,
    provider_account text NOT NULL,
    projects text NOT NULL,
    environment text NOT NULL,
    preparation text NOT NULL,
    prepared_at bigint,
    prepared_by text NOT NULL,
    checked_at bigint,
    checked_by text NOT NULL,
    message text NOT NULL
);


--
-- Name: environment_bindings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.environment_bindings (
    kind text NOT NULL,
    binding_key text NOT NULL,
    company text NOT NULL,
    environment_id text NOT NULL,
    revision bigint NOT NULL,
    created_at bigint,
    updated_at bigint,
    created_by text NOT NULL,
    updated_by text NOT NULL
);


--
-- Name: environments; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.environments (
    id text NOT NULL,
    name text NOT NULL,
    description text NOT NULL,
    driver text NOT NULL,
    status text NOT NULL,
    config text,
    env text,
    metadata text,
    revision bigint NOT NULL,
    created_at bigint,
    updated_at bigint,
    created_by text NOT NULL,
    updated_by text NOT NULL,
    exclusive_key text
);


--
-- Name: leases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.leases (
    id text NOT NULL,
    company text NOT NULL,
    environment_id text NOT NULL,
    workspace text NOT NULL,
    run text NOT NULL,
    status text NOT NULL,
    policy text NOT NULL,
    provider text NOT NULL,
    provider_lease_id text NOT NULL,
    acquired_at bigint,
    last_used_at bigint,
    expires_at bigint,
    released_at bigint,
    failure_reason text NOT NULL,
    cleanup text NOT NULL,
    cleanup_disposition integer NOT NULL,
    after_cleanup text NOT NULL,
    cleanup_attempts integer NOT NULL,
    cleanup_evidence text NOT NULL,
    fingerprint text NOT NULL,
    reuse_key text,
    run_key text,
    replaces text NOT NULL,
    replace_reason text NOT NULL,
    uses integer NOT NULL,
    config text,
    labels text,
    metadata text,
    claimed_by text NOT NULL,
    claimed_until bigint,
    version bigint NOT NULL,
    holder text DEFAULT ''::text NOT NULL,
    holder_until bigint,
    draft boolean DEFAULT false NOT NULL,
    cleanup_evidence_kind text DEFAULT ''::text NOT NULL
);


--
-- Name: provider_health; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_health (
    driver text NOT NULL,
    endpoint text NOT NULL,
    available boolean NOT NULL,
    code text NOT NULL,
    reason text NOT NULL,
    checked_at bigint NOT NULL
);


--
-- Name: prp_commands; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.prp_commands (
    session text NOT NULL,
    seq bigint NOT NULL,
    id text NOT NULL,
    digest text NOT NULL,
    command text NOT NULL,
    state text NOT NULL,
    result text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    secrets_sent_at bigint
);


--
-- Name: prp_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.prp_events (
    session text NOT NULL,
    seq bigint NOT NULL,
    event text NOT NULL,
    ref text,
    stored_at bigint NOT NULL
);


--
-- Name: prp_output_usage; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.prp_output_usage (
    session text NOT NULL,
    task text NOT NULL,
    seq bigint NOT NULL,
    bytes bigint NOT NULL,
    events bigint NOT NULL,
    truncated bigint NOT NULL,
    discarded bigint NOT NULL
);


--
-- Name: prp_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.prp_sessions (
    id text NOT NULL,
    lease text NOT NULL,
    run text NOT NULL,
    company text NOT NULL,
    scope text NOT NULL,
    created_at bigint NOT NULL,
    ticket text,
    holder boolean DEFAULT false NOT NULL,
    conn text,
    conn_until bigint
);


--
-- Name: prp_tickets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.prp_tickets (
    hash text NOT NULL,
    lease text NOT NULL,
    run text NOT NULL,
    company text NOT NULL,
    scope text NOT NULL,
    created_at bigint NOT NULL,
    expires_at bigint NOT NULL,
    used_at bigint,
    session text,
    resume text,
    holder boolean DEFAULT false NOT NULL
);


--
-- Name: qualifications; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.qualifications (
    company text NOT NULL,
    environment_id text NOT NULL,
    fingerprint text NOT NULL,
    image text NOT NULL,
    template text NOT NULL,
    platform_os text NOT NULL,
    platform_arch text NOT NULL,
    platform_variant text NOT NULL,
    platform_libc text NOT NULL,
    platform_libc_version text NOT NULL,
    platform_kernel text NOT NULL,
    platform_release_id text NOT NULL,
    platform_release_version text NOT NULL,
    lease_id text NOT NULL,
    recorded_at bigint,
    invalidated_at bigint,
    invalid_reason text DEFAULT ''::text NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    component text NOT NULL,
    version integer NOT NULL,
    name text NOT NULL,
    applied_at bigint NOT NULL
);


--
-- Name: secret_uses; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.secret_uses (
    lease_id text NOT NULL,
    secret_id text NOT NULL,
    version bigint NOT NULL
);


--
-- Name: secrets_retired; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.secrets_retired (
    secret_id text NOT NULL,
    version bigint NOT NULL
);


--
-- Data for Name: auth_checks; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.auth_checks VALUES ('acme', 'secret:sec_acct@v1', 2, 'succeeded', 'sha256:ab', 'daytona', 'secret:sec_acct@v1', '["proj-1","proj-2"]', 'env_docker', 'prep_2', 1796118675123456000, 'op-1', 1796118735123456000, 'checker', 'ok');
INSERT INTO public.auth_checks VALUES ('acme', 'secret:sec_other@v3', 1, 'pending', 'sha256:cd', 'docker', 'secret:sec_other@v3', '[]', 'env_docker', 'prep_1', 1796118795123456000, 'op-2', NULL, '', '');


--
-- Data for Name: environment_bindings; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.environment_bindings VALUES ('workspace', 'ws-1', 'acme', 'env_ssh', 2, 1796117415123456000, 1796117416123456000, 'admin-1', 'admin-2');
INSERT INTO public.environment_bindings VALUES ('project', 'proj-1', 'acme', 'env_docker', 1, 1796117416123456000, 1796117416123456000, 'admin-1', 'admin-1');
INSERT INTO public.environment_bindings VALUES ('instance_default', '', '', 'env_docker', 1, 1796117417123456000, 1796117417123456000, 'admin-1', 'admin-1');


--
-- Data for Name: environments; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.environments VALUES ('env_ssh', 'build-ssh', 'an SSH build host', 'ssh', 'active', '{"host":"build-1.example.test","port":2222,"private_key":{"$secret":"sec_key","version":2},"user":"ci"}', '{"LANG":"C.UTF-8"}', '{"owner":"ops"}', 3, 1796117415123456000, 1796121015123456000, 'admin-1', 'admin-2', NULL);
INSERT INTO public.environments VALUES ('env_docker', 'docker-debian', '', 'docker', 'active', '{"env":{"API_TOKEN":{"$secret":"sec_tok","version":1}},"image":"127.0.0.1:5000/debian@sha256:0000000000000000000000000000000000000000000000000000000000000007"}', NULL, NULL, 1, 1796117475123456000, 1796117475123456000, 'admin-1', 'admin-1', NULL);
INSERT INTO public.environments VALUES ('env_old', 'old-local', 'archived', 'local', 'archived', NULL, NULL, NULL, 2, 1796117535123456000, 1796117595123456000, 'admin-1', 'admin-1', 'local');


--
-- Data for Name: leases; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.leases VALUES ('lease_active', 'acme', 'env_ssh', 'ws-1', 'run-1', 'active', 'ephemeral', 'ssh', 'berth-lease_active', 1796118015123456000, 1796118075123456000, 1796121615123456000, NULL, '', '', 0, '', 0, '', 'sha256:aa', 'reuse-ws-1', 'run-key-1', '', '', 2, '{"host":"build-1.example.test","private_key":{"$secret":"sec_key","version":2}}', '{"berth.instance":"upgrade","berth.lease":"lease_active"}', '{"task":"make test"}', '', NULL, 1, 'host-a', 1796118135123456000, false, '');
INSERT INTO public.leases VALUES ('lease_released', 'acme', 'env_docker', '', 'run-2', 'released', 'ephemeral', 'docker', 'c0ffee', 1796118195123456000, 1796118255123456000, NULL, 1796118315123456000, '', 'confirmed', 2, '', 1, 'container c0ffee removed', 'sha256:bb', NULL, NULL, '', '', 0, NULL, '{"berth.instance":"upgrade","berth.lease":"lease_released"}', NULL, '', NULL, 1, '', NULL, false, 'provider');
INSERT INTO public.leases VALUES ('lease_draft', 'acme', 'env_docker', '', '', 'pending_cleanup', 'ephemeral', 'docker', 'dead00', 1796118375123456000, NULL, NULL, 1796118435123456000, 'probe: timed out', 'pending', 2, 'failed', 3, '', 'sha256:cc', NULL, NULL, 'lease_released', 'unhealthy', 0, NULL, '{"berth.instance":"upgrade","berth.lease":"lease_draft"}', NULL, 'sweeper-1', 1796118495123456000, 1, '', NULL, true, '');
INSERT INTO public.leases VALUES ('lease_failed', 'globex', 'env_ssh', '', '', 'failed', 'ephemeral', 'ssh', '', 1796118555123456000, NULL, NULL, 1796118615123456000, 'dial: connection refused', 'confirmed', 0, '', 0, 'cgroup berth-lease_failed empty', 'sha256:dd', NULL, NULL, '', '', 0, NULL, '{"berth.instance":"upgrade","berth.lease":"lease_failed"}', NULL, '', NULL, 1, '', NULL, false, 'cgroup');


--
-- Data for Name: provider_health; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.provider_health VALUES ('docker', 'unix:///var/run/docker.sock', true, '', '', 1796117655123456000);
INSERT INTO public.provider_health VALUES ('daytona', 'https://daytona.example.test', false, 'unavailable', 'connection refused', 1796117715123456000);


--
-- Data for Name: prp_commands; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.prp_commands VALUES ('s_1', 1, 'c_1', 'f98db36a8ea2d229c6ee5dc4a57a61da5dd69ea16499005a4acc3c3dcd33f5fc', '{"id":"c_1","digest":"f98db36a8ea2d229c6ee5dc4a57a61da5dd69ea16499005a4acc3c3dcd33f5fc","kind":"task.start","lease":"lease_active","run":"run-1","task_start":{"task_id":"t_1","argv":["sh","-c","make test"],"env":{"CI":"1"},"cwd":"/w","deadline":"2026-12-01T10:20:15.123456Z","output_limit":1048576,"secrets":[{"source":"environment","ref":"secret:sec_key@v2","env":"DEPLOY_KEY"}]}}', 'done', '{"command_id":"c_1","status":"done"}', 1796119815123456000, 1796120115123456000, 1796119815123456000);
INSERT INTO public.prp_commands VALUES ('s_1', 2, 'c_2', '01c63759d96581b7b1395652ebf3da9c19571fcd87973c1cc118449668563317', '{"id":"c_2","digest":"01c63759d96581b7b1395652ebf3da9c19571fcd87973c1cc118449668563317","kind":"task.stop","lease":"lease_active","run":"run-1","task_stop":{"task_id":"t_1","grace_ns":5000000000}}', 'done', '{"command_id":"c_2","status":"done","exit":{"code":-1,"signal":"TERM"},"proof":{"task_id":"t_1","methods":["process-group"],"survivors":[],"verified_at":"2026-12-01T10:15:15.123456Z","complete":true}}', 1796119875123456000, 1796120175123456000, NULL);
INSERT INTO public.prp_commands VALUES ('s_1', 3, 'c_3', '70d680b1d6ff01e927a205f24f098eb941a303a4c392fd017967198c0d09311a', '{"id":"c_3","digest":"70d680b1d6ff01e927a205f24f098eb941a303a4c392fd017967198c0d09311a","kind":"task.start","lease":"lease_active","run":"run-1","task_start":{"task_id":"t_2","argv":["true"]}}', 'received', NULL, 1796119935123456000, 1796119935123456000, NULL);


--
-- Data for Name: prp_events; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.prp_events VALUES ('s_1', 1, '{"kind":"command.result","result":{"command_id":"c_1","status":"done"}}', NULL, 1796119875123456000);
INSERT INTO public.prp_events VALUES ('s_1', 2, '{"kind":"task.started","task_id":"t_1","pid":4242}', NULL, 1796119935123456000);
INSERT INTO public.prp_events VALUES ('s_1', 3, '{"kind":"task.output","task_id":"t_1","output":{"stream":"stdout","offset":0,"data":null}}', '{"file":"s_1/t_1.out","offset":0,"length":12}', 1796119995123456000);
INSERT INTO public.prp_events VALUES ('s_1', 4, '{"kind":"task.exit","task_id":"t_1","exit":{"code":-1,"signal":"TERM"}}', NULL, 1796120055123456000);
INSERT INTO public.prp_events VALUES ('s_1', 5, '{"kind":"task.proof","task_id":"t_1","proof":{"task_id":"t_1","methods":["process-group"],"survivors":[],"verified_at":"2026-12-01T10:15:15.123456Z","complete":true}}', NULL, 1796120115123456000);


--
-- Data for Name: prp_output_usage; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.prp_output_usage VALUES ('s_1', 't_1', 3, 12, 1, 0, 0);


--
-- Data for Name: prp_sessions; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.prp_sessions VALUES ('s_1', 'lease_active', 'run-1', 'acme', 'task', 1796119275123456000, '50e6e96f2d884e49485623954502b9b8305b79093e8e042d616c416368c3495c', true, 'conn-1', 1796119815123456000);
INSERT INTO public.prp_sessions VALUES ('s_2', 'lease_released', 'run-2', 'acme', 'task', 1796118255123456000, NULL, false, NULL, NULL);


--
-- Data for Name: prp_tickets; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.prp_tickets VALUES ('50e6e96f2d884e49485623954502b9b8305b79093e8e042d616c416368c3495c', 'lease_active', 'run-1', 'acme', 'task', 1796119215123456000, 1796119515123456000, 1796119275123456000, 's_1', NULL, true);
INSERT INTO public.prp_tickets VALUES ('4d990a87fbf018e143f8cac5b7303c3906cc45f39f10451da432d6d2dd72a35f', 'lease_active', 'run-1', 'acme', 'task', 1796119335123456000, 1796119635123456000, NULL, NULL, 's_1', true);
INSERT INTO public.prp_tickets VALUES ('bdcd58d614abb1781f048f8096510b1ccf19775b12127503f314fe896ee62731', 'lease_draft', 'probe-1', 'acme', 'probe', 1796119395123456000, 1796119695123456000, NULL, NULL, NULL, false);


--
-- Data for Name: qualifications; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.qualifications VALUES ('acme', 'env_docker', 'sha256:000000000000000000000000000000000000000000000000000000000000000b', '127.0.0.1:5000/debian@sha256:0000000000000000000000000000000000000000000000000000000000000007', '', 'linux', 'amd64', '', 'glibc', '2.36', '6.1.0-18-amd64', 'debian', '12', 'lease_released', 1796117775123456000, NULL, '');
INSERT INTO public.qualifications VALUES ('globex', 'env_docker', 'sha256:000000000000000000000000000000000000000000000000000000000000000c', '127.0.0.1:5000/debian@sha256:0000000000000000000000000000000000000000000000000000000000000007', 'snapshot:fake/template-1', 'linux', 'arm64', '', 'musl', '1.2.4', '', 'alpine', '3.19', 'lease_q2', 1796117835123456000, 1796117895123456000, 'image moved');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_migrations VALUES ('bindings', 1, 'create environment_bindings', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('environment', 1, 'create environments', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('handover', 1, 'create auth_checks', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('health', 1, 'create provider_health', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('lease', 1, 'create leases', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('lease', 2, 'host lease holders', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('lease', 3, 'draft leases, retention and live-lease indexes', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('lease', 4, 'cleanup evidence kinds', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('prp', 1, 'create prp tickets, sessions, commands and events', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('prp', 2, 'prp sessions by lease', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('prp', 3, 'prp secrets delivered at most once per command', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('prp', 4, 'prp output accounting per session and task', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('prp', 5, 'prp resume tickets, holder sessions and live connections', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('qualification', 1, 'create qualifications', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('qualification', 2, 'qualification invalidation', 1796164661094501653);
INSERT INTO public.schema_migrations VALUES ('secret_use', 1, 'create secret_uses and secrets_retired', 1796164661094501653);


--
-- Data for Name: secret_uses; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.secret_uses VALUES ('lease_active', 'sec_key', 1);
INSERT INTO public.secret_uses VALUES ('lease_active', 'sec_key', 2);
INSERT INTO public.secret_uses VALUES ('lease_draft', 'sec_tok', 1);


--
-- Data for Name: secrets_retired; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.secrets_retired VALUES ('sec_key', 1);


--
-- Name: auth_checks auth_checks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.auth_checks
    ADD CONSTRAINT auth_checks_pkey PRIMARY KEY (company, account_ref);


--
-- Name: environment_bindings environment_bindings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.environment_bindings
    ADD CONSTRAINT environment_bindings_pkey PRIMARY KEY (kind, binding_key);


--
-- Name: environments environments_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.environments
    ADD CONSTRAINT environments_pkey PRIMARY KEY (id);


--
-- Name: leases leases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (id);


--
-- Name: provider_health provider_health_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_health
    ADD CONSTRAINT provider_health_pkey PRIMARY KEY (driver, endpoint);


--
-- Name: prp_commands prp_commands_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.prp_commands
    ADD CONSTRAINT prp_commands_pkey PRIMARY KEY (session, seq);


--
-- Name: prp_events prp_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.prp_events
    ADD CONSTRAINT prp_events_pkey PRIMARY KEY (session, seq);


--
-- Name: prp_output_usage prp_output_usage_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.prp_output_usage
    ADD CONSTRAINT prp_output_usage_pkey PRIMARY KEY (session, task);


--
-- Name: prp_sessions prp_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.prp_sessions
    ADD CONSTRAINT prp_sessions_pkey PRIMARY KEY (id);


--
-- Name: prp_tickets prp_tickets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.prp_tickets
    ADD CONSTRAINT prp_tickets_pkey PRIMARY KEY (hash);


--
-- Name: qualifications qualifications_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.qualifications
    ADD CONSTRAINT qualifications_pkey PRIMARY KEY (company, environment_id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (component, version);


--
-- Name: secret_uses secret_uses_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.secret_uses
    ADD CONSTRAINT secret_uses_pkey PRIMARY KEY (lease_id, secret_id, version);


--
-- Name: secrets_retired secrets_retired_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.secrets_retired
    ADD CONSTRAINT secrets_retired_pkey PRIMARY KEY (secret_id, version);


--
-- Name: environment_bindings_company; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX environment_bindings_company ON public.environment_bindings USING btree (company);


--
-- Name: environment_bindings_environment; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX environment_bindings_environment ON public.environment_bindings USING btree (environment_id);


--
-- Name: environments_driver; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX environments_driver ON public.environments USING btree (driver);


--
-- Name: environments_exclusive_key; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX environments_exclusive_key ON public.environments USING btree (exclusive_key);


--
-- Name: environments_name_key; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX environments_name_key ON public.environments USING btree (name);


--
-- Name: leases_acquired; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_acquired ON public.leases USING btree (acquired_at, id);


--
-- Name: leases_environment; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_environment ON public.leases USING btree (environment_id);


--
-- Name: leases_environment_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_environment_status ON public.leases USING btree (environment_id, status, reuse_key);


--
-- Name: leases_provider_lease_id; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_provider_lease_id ON public.leases USING btree (provider_lease_id);


--
-- Name: leases_reuse_key; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX leases_reuse_key ON public.leases USING btree (reuse_key) WHERE (reuse_key IS NOT NULL);


--
-- Name: leases_run_key; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX leases_run_key ON public.leases USING btree (run_key) WHERE (run_key IS NOT NULL);


--
-- Name: leases_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_status ON public.leases USING btree (status);


--
-- Name: leases_status_released; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_status_released ON public.leases USING btree (status, released_at);


--
-- Name: leases_status_reuse; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_status_reuse ON public.leases USING btree (status, reuse_key);


--
-- Name: prp_commands_id; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX prp_commands_id ON public.prp_commands USING btree (session, id);


--
-- Name: prp_sessions_lease; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX prp_sessions_lease ON public.prp_sessions USING btree (lease, created_at);


--
-- Name: qualifications_environment; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX qualifications_environment ON public.qualifications USING btree (environment_id);


--
-- Name: secret_uses_secret; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX secret_uses_secret ON public.secret_uses USING btree (secret_id, version);


--
-- PostgreSQL database dump complete
--

\unrestrict cdMhZFu1CcFQ27D395GlXQo6JKDd8yMd6twxNwaAOI8NQEylRQrCX6AeNsAGhVW

