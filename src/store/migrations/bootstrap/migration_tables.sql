-- The runner's own tables, read before any migration is applied. Run by migrate.ts on every
-- call, in the schema's advisory lock with `search_path` set to the schema: not numbered, so
-- every statement must be idempotent.

create table if not exists schema_migrations (
  version text primary key,
  name text not null,
  applied_at timestamptz not null default now(),
  checksum text not null
);

create table if not exists schema_repeatable_migrations (
  file text primary key,
  applied_at timestamptz not null default now(),
  checksum text not null
);

comment on table schema_migrations is 'Migrations applied to this schema by perks-worker migrate.';
comment on column schema_migrations.version is 'Six-digit version, the prefix of the file name (000001).';
comment on column schema_migrations.name is 'Name part of the file (init for 000001_init.sql).';
comment on column schema_migrations.applied_at is 'When the migration was applied.';
comment on column schema_migrations.checksum is 'sha256 of the file; the statements of an applied file must never change.';
comment on table schema_repeatable_migrations is 'Repeatable migrations (functions, migrations/repeatable/) as last applied; each is applied again when its file changes, but not by a build older than the schema.';
comment on column schema_repeatable_migrations.file is 'File name (write_reward_pages.sql).';
comment on column schema_repeatable_migrations.applied_at is 'When this checksum was applied.';
comment on column schema_repeatable_migrations.checksum is 'sha256 of the file as last applied.';
