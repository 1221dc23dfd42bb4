-- The shardingNodes' databases on each backend (run once by the MariaDB image at first start).
CREATE DATABASE IF NOT EXISTS db1;
CREATE DATABASE IF NOT EXISTS db2;
CREATE DATABASE IF NOT EXISTS db3;
