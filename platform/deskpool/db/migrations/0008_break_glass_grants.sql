-- Grants made by the break-glass command (`deskpool admin grant`) say so in their source.
ALTER TABLE grants DROP CONSTRAINT grants_source_check;
ALTER TABLE grants ADD CONSTRAINT grants_source_check
    CHECK (source IN ('api', 'bootstrap', 'break_glass'));
