export * from '../redis/connection.js';
