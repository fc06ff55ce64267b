<?php

declare(strict_types=1);

/*
 * The PSR-4 autoloader of composer.json's "autoload" (DjangoJobQueue\Client\ => src/),
 * for a checkout used without Composer: require this file, then use the classes.
 */

spl_autoload_register(static function (string $class): void {
    $prefix = 'DjangoJobQueue\\Client\\';
    if (strncmp($class, $prefix, strlen($prefix)) !== 0) {
        return;
    }
    $file = __DIR__ . '/' . str_replace('\\', '/', substr($class, strlen($prefix))) . '.php';
    if (is_file($file)) {
        require $file;
    }
});
